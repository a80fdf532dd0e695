"""The step journal's statements (docs/steps.md).

A worker's writes (a step started, a step done) are fenced like its moves: they touch the journal
only while the job is Processing in JobsHot under this worker at this attempt, and they lock that
row for the statement (a shared lock; SQL Server: an update lock) so a sweep or a cancel taking the
job waits for the write, or the write sees the job gone. Each is one statement, sent without an
explicit transaction: a step costs one round trip to start and one to finish. They return the row
they wrote (a driver may not count the rows of an INSERT ... SELECT: psycopg answers -1).
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import (
    Delete,
    Exists,
    Insert,
    Select,
    Table,
    UnicodeText,
    Update,
    bindparam,
    delete,
    exists,
    func,
    insert,
    literal_column,
    null,
    select,
    update,
)
from sqlalchemy.sql.elements import ColumnElement

from chokaq.domain.steps import DONE, STARTED
from chokaq.storage.schema import job_steps, jobs_hot
from chokaq.storage.sqlfuncs import MSSQL_QUEUE_LOCK_HINT, ListParam, in_list, utcnow
from chokaq.storage.statements.retention import oldest_ids
from chokaq.storage.statements.status import PROCESSING

_STARTED: ColumnElement[Any] = literal_column(str(STARTED))
_DONE: ColumnElement[Any] = literal_column(str(DONE))


@functools.cache
def owned_statement() -> Select[Any]:
    """The job's JobsHot row while it is Processing under ``step_worker`` at ``step_attempt``."""
    hot = jobs_hot.c
    return (
        select(literal_column("1"))
        .select_from(jobs_hot)
        .where(
            hot.Id == bindparam("step_job", type_=hot.Id.type),
            hot.Status == literal_column(str(int(PROCESSING))),
            hot.WorkerId == bindparam("step_worker", type_=hot.WorkerId.type),
            hot.AttemptCount == bindparam("step_attempt", type_=hot.AttemptCount.type),
        )
    )


def _owned() -> Select[Any]:
    """:func:`owned_statement`, locking the row for the statement (see the module's docstring)."""
    return owned_statement().with_for_update(read=True, of=jobs_hot).with_hint(jobs_hot, MSSQL_QUEUE_LOCK_HINT, "mssql")


def _fenced() -> Exists:
    return exists(_owned())


def _this_step() -> list[ColumnElement[bool]]:
    s = job_steps.c
    return [
        s.JobId == bindparam("step_job", type_=s.JobId.type),
        s.Name == bindparam("step_name", type_=s.Name.type),
    ]


@functools.cache
def step_start_statement() -> Insert:
    """A new journal row ``step_name`` (started) for the job, written only while the worker holds
    it at this attempt, and only if the job has no step of that name yet (a replay after a lost
    reply then inserts nothing, and the caller reads what is there)."""
    s = job_steps.c
    hot = jobs_hot.c
    owned = _owned().with_only_columns(
        hot.Id,
        bindparam("step_name", type_=s.Name.type),
        hot.AttemptCount,
        hot.WorkerId,
        _STARTED,
        utcnow(),
    )
    fresh = ~exists(select(literal_column("1")).select_from(job_steps).where(*_this_step()))
    columns = [s.JobId, s.Name, s.Attempt, s.WorkerId, s.State, s.StartedAtUtc]
    return insert(job_steps).from_select(columns, owned.where(fresh)).returning(s.State)


@functools.cache
def step_restart_statement() -> Update:
    """A step that started in an earlier attempt and never confirmed (the handler chose
    ``run_again``) or failed there, started again by this one. Idempotent: a replay sets the same
    values."""
    s = job_steps.c
    return (
        update(job_steps)
        .where(*_this_step(), s.State != _DONE, _fenced())
        .values(
            Attempt=bindparam("step_attempt", type_=s.Attempt.type),
            WorkerId=bindparam("step_worker", type_=s.WorkerId.type),
            State=_STARTED,
            StartedAtUtc=utcnow(),
            DoneAtUtc=null(),
            Result=null(),
        )
        .returning(s.State)
    )


@functools.cache
def step_done_statement(resolve: bool, has_result: bool = True) -> Update:
    """The step's end: ``step_state`` (done, or failed: its body raised) with ``step_result`` (JSON
    text), or NULL in the text without ``has_result`` (a NULL parameter costs pyodbc a describe).
    Without ``resolve`` only this attempt's own start is ended (a replay after a lost
    reply writes the same values); with it, a start of an earlier attempt the handler established
    as done (``mark_done``)."""
    s = job_steps.c
    mine = (
        [s.State == _STARTED]
        if resolve
        else [
            s.Attempt == bindparam("step_attempt", type_=s.Attempt.type),
            s.WorkerId == bindparam("step_worker", type_=s.WorkerId.type),
        ]
    )
    values: dict[str, Any] = {
        "State": _DONE if resolve else bindparam("step_state", type_=s.State.type),
        "DoneAtUtc": utcnow(),
        "Result": bindparam("step_result", type_=UnicodeText()) if has_result else null(),
    }
    if resolve:
        values["Attempt"] = bindparam("step_attempt", type_=s.Attempt.type)
        values["WorkerId"] = bindparam("step_worker", type_=s.WorkerId.type)
    return update(job_steps).where(*_this_step(), *mine, _fenced()).values(**values).returning(s.State)


@functools.cache
def steps_of_statement() -> Select[Any]:
    """A job's journal in the order its steps started (one read: by primary key prefix)."""
    s = job_steps.c
    return (
        select(s.Name, s.Attempt, s.WorkerId, s.State, s.StartedAtUtc, s.DoneAtUtc, s.Result)
        .where(s.JobId == bindparam("step_job", type_=s.JobId.type))
        .order_by(s.StartedAtUtc, s.Name)
    )


@functools.cache
def delete_steps_statement() -> Delete:
    """The journals of the jobs ``step_jobs`` (one list parameter, whatever the count)."""
    s = job_steps.c
    return delete(job_steps).where(in_list(s.JobId, bindparam("step_jobs", type_=ListParam(s.JobId.type))))


@functools.cache
def journal_counts_statement() -> Select[Any]:
    """``(JobId, rows)`` for the jobs ``step_jobs`` that have a journal."""
    s = job_steps.c
    in_jobs = in_list(s.JobId, bindparam("step_jobs", type_=ListParam(s.JobId.type)))
    return select(s.JobId, func.count()).where(in_jobs).group_by(s.JobId)


def purge_older_steps_statement(table: Table, time_column: Any, older_than: Any, size: int) -> Delete:
    """The journals of the jobs :func:`purge_older_statement` deletes next (the same oldest
    ``size`` rows of ``table``), sent first in the same transaction."""
    return delete(job_steps).where(job_steps.c.JobId.in_(oldest_ids(table, time_column, older_than, size)))
