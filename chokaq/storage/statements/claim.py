"""The claim: Pending -> Fetched (or straight to Processing) for up to ``limit`` due jobs.

Built once per shape and cached: building it per call costs more than running it.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Select, bindparam, case, column, false, func, literal_column, or_, select, true, update
from sqlalchemy.sql.dml import ReturningUpdate
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.expression import table as sql_table

from chokaq.storage.dialects.sqlserver import MAX_ROWS_PER_STATEMENT
from chokaq.storage.dialects.sqlserver_shapes import (
    CLAIM_READ_HINT,
    ClaimPick,
    CteUpdate,
    name_rowset,
)
from chokaq.storage.schema import hot_record_columns, jobs_hot, queues
from chokaq.storage.sqlfuncs import MSSQL_CLAIM_HINT, ListParam, claim_lock, in_list, utcnow
from chokaq.storage.statements.breakers import not_blocked
from chokaq.storage.statements.columns import Columns
from chokaq.storage.statements.status import FETCHED, PENDING, PROCESSING, status_is


def zombie_retry_flag(zombie_retry: bool, cols: Columns = jobs_hot.c) -> ColumnElement[bool]:
    """ZombieRetry as stamped at start: true for the job types whose handlers asked for it."""
    if not zombie_retry:
        return false()
    types = bindparam("zombie_types", type_=ListParam(jobs_hot.c.Type.type))
    return case((in_list(cols.Type, types), true()), else_=false())


def started_values(zombie_retry: bool, cols: Columns = jobs_hot.c) -> dict[str, ColumnElement[Any]]:
    """Fetched -> Processing, or Pending -> Processing for a claim that starts at once.

    ``cols``: the columns the expressions read (SQL Server's claim updates a CTE, not the table).
    """
    return {
        "Status": literal_column(str(PROCESSING)),
        # A literal 1: a bind parameter in arithmetic is one SQL Server must guess the type of.
        "AttemptCount": cols.AttemptCount + literal_column("1"),
        "StartedAtUtc": utcnow(),
        "HeartbeatUtc": utcnow(),
        "LastUpdatedUtc": utcnow(),
        "ZombieRetry": zombie_retry_flag(zombie_retry, cols),
    }


@functools.lru_cache(maxsize=256)
def claim_statement(
    by_queue: bool, limited: bool, limit: int, start: bool = False, zombie_retry: bool = False, breaker: bool = False
) -> ReturningUpdate[Any]:
    """The claim UPDATE, built once per shape (building it per call costs more than running it).

    ``start``: the claimed jobs go straight to Processing, for a worker with idle slots that
    starts them at once. Fetched exists for jobs that wait in a prefetch buffer; a job started
    right away skips it and saves a write.
    """
    cand_t = jobs_hot.alias("cand")
    cand = select(cand_t.c.Id).where(
        status_is(cand_t.c.Status, PENDING),
        cand_t.c.ScheduledAtUtc <= utcnow(),
        # Jobs whose previous run is still alive in the claiming worker: an operator resurrected
        # a zombie that kept running there. Worker id and attempt number would match both runs,
        # so the fence could not tell them apart; the new run waits until the old one is gone.
        ~in_list(cand_t.c.Id, bindparam("claim_skip", type_=ListParam(cand_t.c.Id.type))),
    )
    if by_queue:
        cand = cand.where(cand_t.c.Queue.in_(bindparam("claim_queues", expanding=True)))
    blocked = queues.c.IsPaused == true()
    if not limited:
        blocked = or_(blocked, queues.c.MaxWorkers.isnot(None))
    # NOT IN an uncorrelated subquery: the database evaluates it once (a hashed subplan) and
    # still walks the fetch index in claim order, stopping after ``limit`` rows. A correlated
    # NOT EXISTS becomes an anti-join that sorts every Pending row instead.
    cand = cand.where(cand_t.c.Queue.not_in(select(queues.c.Name).where(blocked)))
    if breaker:
        # Execution.CircuitBreaker on: types whose breaker is not closed wait (statements/breakers.py).
        cand = cand.where(not_blocked(cand_t.c.Type))
    cand = claim_lock(
        # A plain int: SQL Server renders it as TOP (a bind parameter would become ROW_NUMBER()).
        cand.order_by(cand_t.c.Priority.desc(), cand_t.c.ScheduledAtUtc, cand_t.c.CreatedAtUtc).limit(limit),
        cand_t,
    )
    # A materialised CTE: as a plain IN-subquery PostgreSQL may re-run the LIMIT once per outer
    # row (a nested-loop semi-join) and claim more than ``limit`` rows. The outer UPDATE goes by
    # Id alone: the CTE holds the row locks, and a Status filter here would tempt the planner
    # to scan the whole Pending index for every claim.
    chosen = cand.cte("claim").prefix_with("MATERIALIZED", dialect="postgresql")
    values: dict[str, Any] = {"Status": FETCHED, "WorkerId": bindparam("claim_worker"), "LastUpdatedUtc": utcnow()}
    if start:
        values.update(started_values(zombie_retry))
    return update(jobs_hot).where(jobs_hot.c.Id.in_(select(chosen.c.Id))).values(values).returning(*hot_record_columns)


def mssql_queues(by_queue: bool, limited: bool, slots: int, param: str = "claim_queues") -> Select[Any]:
    """The queues a SQL Server claim reads, at most ``slots`` of them: those named in the list
    parameter ``param`` (``by_queue``), else every queue row; either way none that is paused, nor,
    unless ``limited``, one with MaxWorkers (their own locked claim serves those).

    A queue-level test, made once per queue: a paused or capped queue's jobs are never read. Every
    job's queue has a row (enqueue creates it first: QueueCache.ensure). More queues than
    ``slots``: a random ``slots`` of them this time, so that a claim's locks stay bounded (see
    :func:`mssql_claim_statement`) and every queue still gets its turns."""
    q = queues.c
    if by_queue:
        blocked = q.IsPaused == true() if limited else or_(q.IsPaused == true(), q.MaxWorkers.isnot(None))
        names = name_rowset(param, q.Name)
        chosen = select(names.c.Name).where(names.c.Name.not_in(select(q.Name).where(blocked)))
    else:
        chosen = select(q.Name).where(q.IsPaused == false(), *([] if limited else [q.MaxWorkers.is_(None)]))
    return chosen.order_by(func.newid()).limit(slots)


def mssql_due(limit: int, *extra: ColumnElement[bool]) -> Select[Any]:
    """One queue's due jobs (the queue ``q.[Name]`` of the enclosing CROSS APPLY), read from the
    claim index in its order: Queue is its first key (a seek), Status = 0 its filter, Priority,
    ScheduledAtUtc and CreatedAtUtc its other keys, Type an included column, Id the row locator.
    Nothing in this read needs the clustered row, so it locks only the claim index's keys."""
    hot = jobs_hot.c
    return (
        select(hot.Id, hot.Priority, hot.ScheduledAtUtc, hot.CreatedAtUtc)
        .where(
            hot.Queue == literal_column("q.[Name]", hot.Queue.type),
            status_is(hot.Status, PENDING),
            hot.ScheduledAtUtc <= utcnow(),
            *extra,
        )
        .order_by(hot.Priority.desc(), hot.ScheduledAtUtc, hot.CreatedAtUtc)
        .limit(limit)
        .with_hint(jobs_hot, CLAIM_READ_HINT, "mssql")
    )


CLAIM_ORDER = ["[Priority] DESC", "[ScheduledAtUtc]", "[CreatedAtUtc]"]


@functools.lru_cache(maxsize=256)
def mssql_claim_statement(
    by_queue: bool,
    limited: bool,
    limit: int,
    start: bool = False,
    zombie_retry: bool = False,
    breaker: bool = False,
    slots: int | None = None,
) -> CteUpdate:
    """SQL Server's claim, one shape for every claim (all queues, ``--queues``, one queue, a
    MaxWorkers queue's locked claim)::

        WITH pick AS (SELECT TOP (n) j.Id FROM (<queues>) AS q
                      CROSS APPLY (SELECT TOP (n) ... FROM JobsHot WITH (INDEX(IX_JobsHot_Fetch),
                                   UPDLOCK, READPAST, ROWLOCK) WHERE Queue = q.Name ...) AS j
                      ORDER BY Priority DESC, ScheduledAtUtc, CreatedAtUtc),
             c AS (SELECT ... FROM JobsHot WITH (UPDLOCK, READPAST, ROWLOCK) WHERE Id IN (pick))
        UPDATE c SET ... OUTPUT inserted....

    Lock order, the same in every claim: U locks on claim-index keys (each queue's range, in the
    index's order), then U locks on the picked clustered rows, then X on those rows and on their
    index keys. A claimer never reads a second index with locks, so it never holds a lock on a row
    through one index while another claimer holds that row through another (the 1205 cycle two
    indexes made); READPAST on both reads skips a row that any other session holds.

    Locks per statement: at most ``limit`` keys per queue read, for at most ``slots`` queues
    (default: as many as keep ``slots x limit`` within MAX_ROWS_PER_STATEMENT), and ``limit``
    clustered rows; the profile keeps ``limit`` within it too.
    """
    hot = jobs_hot.c
    extra = [~in_list(hot.Id, bindparam("claim_skip", type_=ListParam(hot.Id.type)))]
    if breaker:
        extra.append(not_blocked(hot.Type))
    slots = slots or max(1, MAX_ROWS_PER_STATEMENT // max(1, limit))
    pick = ClaimPick(mssql_queues(by_queue, limited, slots), mssql_due(limit, *extra), ["Id"], CLAIM_ORDER, limit)
    picked = sql_table("pick", column("Id", jobs_hot.c.Id.type))
    # c re-reads the picked rows by primary key with the same skip-and-lock hints: a row another
    # session holds (an operator's change) is skipped this time, never waited for.
    chosen = (
        select(*hot_record_columns)
        .where(hot.Id.in_(select(picked.c.Id)))
        .with_hint(jobs_hot, MSSQL_CLAIM_HINT, "mssql")
    )
    cte = sql_table("c", *(column(col.name, col.type) for col in hot_record_columns))
    values: dict[str, ColumnElement[Any]] = {
        "Status": literal_column(str(FETCHED)),
        "WorkerId": bindparam("claim_worker", type_=hot.WorkerId.type),
        "LastUpdatedUtc": utcnow(),
    }
    if start:
        values.update(started_values(zombie_retry, cte.c))
    return CteUpdate(chosen, values, [col.name for col in hot_record_columns], pick=pick)
