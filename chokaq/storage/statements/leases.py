"""A worker's fenced updates of its own leases inside JobsHot: start, heartbeat, release, retry,
reschedule. Each is one UPDATE, cached per count of attempt groups (see :func:`.fence.fence`)."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import UnicodeText, bindparam, exists, func, literal_column, null, true, update
from sqlalchemy.sql.dml import ReturningUpdate
from sqlalchemy.sql.elements import ColumnElement

from chokaq.storage.schema import jobs_hot, queues
from chokaq.storage.sqlfuncs import lookup_text, seconds, utc_offset, utcnow
from chokaq.storage.statements.claim import started_values
from chokaq.storage.statements.columns import Columns
from chokaq.storage.statements.fence import fence
from chokaq.storage.statements.status import FETCHED, PENDING, PROCESSING


@functools.lru_cache(maxsize=64)
def start_statement(groups: int, zombie_retry: bool) -> ReturningUpdate[Any]:
    hot = jobs_hot.c
    paused = exists().where(queues.c.Name == hot.Queue, queues.c.IsPaused == true())
    return (
        update(jobs_hot)
        .where(fence(groups, FETCHED), ~paused)
        .values(started_values(zombie_retry))
        # Only what changed: the caller already holds the rest of each row.
        .returning(hot.Id, hot.AttemptCount, hot.StartedAtUtc, hot.HeartbeatUtc, hot.LastUpdatedUtc, hot.ZombieRetry)
    )


@functools.lru_cache(maxsize=32)
def heartbeat_statement(groups: int, logs: bool = False, progress: bool = False) -> ReturningUpdate[Any]:
    """The leases' heartbeat; with ``logs`` or ``progress``, each job found in the ``job_logs`` or
    ``job_progress`` mapping gets its new value too (one statement a tick, however many log)."""
    hot = jobs_hot.c
    values: dict[str, ColumnElement[Any]] = {"HeartbeatUtc": utcnow(), **notes_values(hot, logs, progress, many=True)}
    return update(jobs_hot).where(fence(groups, PROCESSING)).values(values).returning(hot.Id)


def notes_values(columns: Columns, logs: bool, progress: bool, *, many: bool) -> dict[str, ColumnElement[Any]]:
    """New ``Logs`` and ``Progress`` values (chokaq.storage.job_notes): a job's own (``logs``,
    ``progress``), or with ``many`` its entry in ``job_logs`` / ``job_progress``, the column kept
    for jobs that have none."""
    values: dict[str, ColumnElement[Any]] = {}
    for wanted, name, param in ((logs, "Logs", "logs"), (progress, "Progress", "progress")):
        if not wanted:
            continue
        if many:
            found = lookup_text(columns.Id, bindparam(f"job_{param}", type_=UnicodeText()))
            values[name] = func.coalesce(found, columns[name])
        else:
            values[name] = bindparam(param, type_=jobs_hot.c[name].type)
    return values


@functools.lru_cache(maxsize=32)
def release_statement(groups: int) -> ReturningUpdate[Any]:
    hot = jobs_hot.c
    return (
        update(jobs_hot)
        .where(fence(groups, FETCHED))
        # NULL in the text: a NULL parameter costs pyodbc a describe round trip on SQL Server.
        .values(Status=literal_column(str(PENDING)), WorkerId=null(), LastUpdatedUtc=utcnow())
        .returning(hot.Id)
    )


def back_to_pending(due: ColumnElement[Any]) -> dict[str, ColumnElement[Any]]:
    """A running job made Pending again, due at ``due``: no owner, no heartbeat. (The SET clause
    renders in the table's column order, whatever the order here.)"""
    return {
        "Status": literal_column(str(PENDING)),
        "WorkerId": null(),
        "HeartbeatUtc": null(),
        "ScheduledAtUtc": due,
        "LastUpdatedUtc": utcnow(),
    }


@functools.lru_cache(maxsize=32)
def retry_statement(
    groups: int, history: bool = False, logs: bool = False, progress: bool = False
) -> ReturningUpdate[Any]:
    """Processing -> Pending, due ``retry_delay`` seconds from now; with ``history``, the job's
    attempt history becomes ``attempts`` (the failed attempt added by the worker); with ``logs``
    and ``progress``, its logs and progress become those parameters."""
    values = back_to_pending(utc_offset(seconds(name="retry_delay")))
    if history:
        values["Attempts"] = bindparam("attempts", type_=jobs_hot.c.Attempts.type)
    values.update(notes_values(jobs_hot.c, logs, progress, many=False))
    return update(jobs_hot).where(fence(groups, PROCESSING)).values(values).returning(jobs_hot.c.Queue)


@functools.lru_cache(maxsize=32)
def reschedule_statement(groups: int) -> ReturningUpdate[Any]:
    """Processing -> Pending at once, the attempt given back (a handler stopped on shutdown)."""
    given_back = {"AttemptCount": jobs_hot.c.AttemptCount - literal_column("1")}
    return (
        update(jobs_hot)
        .where(fence(groups, PROCESSING))
        .values({**back_to_pending(utcnow()), **given_back})
        .returning(jobs_hot.c.Id)
    )
