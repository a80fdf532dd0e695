"""The claim: Pending -> Fetched (or straight to Processing) for up to ``limit`` due jobs.

Built once per shape and cached: building it per call costs more than running it.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import bindparam, case, column, false, literal_column, or_, select, true, union_all, update
from sqlalchemy.sql.dml import ReturningUpdate
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.expression import table as sql_table

from chokaq.storage.dialects.sqlserver_shapes import CteUpdate
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


@functools.lru_cache(maxsize=256)
def mssql_claim_statement(
    queue_count: int, limited: bool, limit: int, start: bool = False, zombie_retry: bool = False, breaker: bool = False
) -> CteUpdate:
    """SQL Server's claim: ``WITH c AS (SELECT TOP (n) ... WITH (UPDLOCK, READPAST, ROWLOCK)) UPDATE c``.

    The rows are locked once, by the read that chose them, through the index it walked; an UPDATE
    of a second JobsHot reference would take its own key locks, and claimers reading different
    indexes (by queue, all queues) could then deadlock on each other's rows.

    ``queue_count`` > 1 (``--queues a,b``): one TOP (n) per queue, each walking IX_JobsHot_Fetch
    (Queue, Priority DESC, ScheduledAtUtc, CreatedAtUtc) in order, then TOP (n) over their union.
    ``Queue IN (a, b)`` cannot be read in that order: SQL Server would sort, and lock, every due
    row of those queues. Queues are bound one parameter each (``claim_queue_<i>``).
    """
    hot = jobs_hot.c
    blocked = queues.c.IsPaused == true()
    if not limited:
        blocked = or_(blocked, queues.c.MaxWorkers.isnot(None))
    order = (hot.Priority.desc(), hot.ScheduledAtUtc, hot.CreatedAtUtc)

    def due(*extra: ColumnElement[bool]) -> list[ColumnElement[bool]]:
        return [
            status_is(hot.Status, PENDING),
            hot.ScheduledAtUtc <= utcnow(),
            ~in_list(hot.Id, bindparam("claim_skip", type_=ListParam(hot.Id.type))),
            *extra,
            hot.Queue.not_in(select(queues.c.Name).where(blocked)),
            *([not_blocked(hot.Type)] if breaker else []),
        ]

    def queue(i: int) -> ColumnElement[bool]:
        return hot.Queue == bindparam(f"claim_queue_{i}", type_=hot.Queue.type)

    cte = sql_table("c", *(column(col.name, col.type) for col in hot_record_columns))
    values: dict[str, ColumnElement[Any]] = {
        "Status": literal_column(str(FETCHED)),
        "WorkerId": bindparam("claim_worker", type_=hot.WorkerId.type),
        "LastUpdatedUtc": utcnow(),
    }
    if start:
        values.update(started_values(zombie_retry, cte.c))
    outputs = [col.name for col in hot_record_columns]
    if queue_count <= 1:
        chosen = select(*hot_record_columns).where(*due(*([queue(0)] if queue_count else [])))
        chosen = chosen.order_by(*order).limit(limit).with_hint(jobs_hot, MSSQL_CLAIM_HINT, "mssql")
        return CteUpdate(chosen, values, outputs)
    branches = []
    for i in range(queue_count):
        branch = (
            select(hot.Id, hot.Priority, hot.ScheduledAtUtc, hot.CreatedAtUtc)
            .where(*due(queue(i)))
            .order_by(*order)
            .limit(limit)
            .with_hint(jobs_hot, MSSQL_CLAIM_HINT, "mssql")
            .subquery(f"q{i}")
        )
        branches.append(select(*branch.c))
    every = union_all(*branches).subquery("u")
    pick = select(every.c.Id).order_by(every.c.Priority.desc(), every.c.ScheduledAtUtc, every.c.CreatedAtUtc)
    picked = sql_table("pick", column("Id", jobs_hot.c.Id.type))
    # The branches hold the U locks (READPAST skipped rows other claimers hold); c re-reads the
    # picked rows by primary key.
    chosen = select(*hot_record_columns).where(hot.Id.in_(select(picked.c.Id)))
    return CteUpdate(chosen, values, outputs, pick=pick.limit(limit))
