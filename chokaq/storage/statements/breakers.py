"""The circuit breakers' statements (docs/circuit-breaker.md): the claim's filter, the locked
read and write of one type's row, the probe claim of a half-open type, and the sweep's move of
jobs that waited past Retry.MaxJobAge behind an open breaker. None of them runs while
Execution.CircuitBreaker is off."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from sqlalchemy import Select, String, and_, bindparam, insert, literal_column, null, select, true, update
from sqlalchemy.sql.dml import Insert, ReturningUpdate, Update
from sqlalchemy.sql.elements import ColumnElement

from chokaq.domain.breakers import CLOSED
from chokaq.domain.states import FailureReason
from chokaq.storage.dialects.sqlserver import MAX_ROWS_PER_STATEMENT
from chokaq.storage.dialects.sqlserver_shapes import ClaimPick
from chokaq.storage.schema import circuit_breakers, hot_record_columns, jobs_dlq, jobs_hot, queues
from chokaq.storage.sqlfuncs import ListParam, claim_lock, in_list, row_lock, seconds, utc_offset, utcnow
from chokaq.storage.statements.columns import Columns
from chokaq.storage.statements.counters import FAILED
from chokaq.storage.statements.status import FETCHED, PENDING, status_is

if TYPE_CHECKING:
    from chokaq.storage.statements.moves import MoveStatements

cb = circuit_breakers.c
# The row's columns a transition writes (JobType is the key).
STATE_COLUMNS = (
    "State",
    "FailureCount",
    "WindowStartUtc",
    "OpenedAtUtc",
    "OpenUntilUtc",
    "ProbesInFlight",
    "UpdatedBy",
    "LastUpdatedUtc",
)


def blocked_types() -> Select[Any]:
    """The types whose breaker is not closed: open ones wait, half-open ones get only their probes.
    An uncorrelated subquery, read once per claim (as the paused queues are)."""
    return select(cb.JobType).where(cb.State != literal_column(str(CLOSED)))


def not_blocked(type_column: ColumnElement[Any]) -> ColumnElement[bool]:
    """The claim's extra condition when a worker has breakers on."""
    return type_column.not_in(blocked_types())


@functools.lru_cache(maxsize=1)
def locked_row_statement() -> Select[Any]:
    """One type's row, locked until commit, with the database's clock (the transition's now)."""
    return row_lock(
        select(*circuit_breakers.c, utcnow().label("Now")).where(
            cb.JobType == bindparam("breaker_type", type_=cb.JobType.type)
        ),
        circuit_breakers,
    )


@functools.lru_cache(maxsize=1)
def insert_row_statement() -> Insert:
    """A closed row for a type that has none yet (its first counted failure)."""
    return insert(circuit_breakers).values(
        JobType=bindparam("breaker_type", type_=cb.JobType.type),
        State=literal_column(str(CLOSED)),
        FailureCount=literal_column("0"),
        ProbesInFlight=literal_column("0"),
        LastUpdatedUtc=utcnow(),
    )


@functools.lru_cache(maxsize=32)
def write_row_statement(nulls: frozenset[str] = frozenset()) -> Update:
    """The locked row's new state, as the transition (chokaq.domain.breakers) decided it.

    ``nulls``: the columns set to NULL, written as NULL in the text: a NULL parameter is one
    pyodbc has SQL Server describe, a round trip of its own. At most 16 shapes (four nullable
    columns), each built once."""
    return (
        update(circuit_breakers)
        .where(cb.JobType == bindparam("breaker_type", type_=cb.JobType.type))
        .values(
            {name: null() if name in nulls else bindparam(f"b_{name}", type_=cb[name].type) for name in STATE_COLUMNS}
        )
    )


@functools.lru_cache(maxsize=1)
def rows_statement() -> Select[Any]:
    """Every breaker, for the operator and for a worker looking for types to probe."""
    return select(*circuit_breakers.c).order_by(cb.JobType)


@functools.lru_cache(maxsize=1)
def not_closed_statement() -> Select[Any]:
    """The rows a worker looks at for probes: open or half-open (few, usually none)."""
    return select(*circuit_breakers.c).where(cb.State != literal_column(str(CLOSED)))


@functools.lru_cache(maxsize=8)
def probe_ids_statement(limit: int, by_queue: bool) -> Select[Any]:
    """Up to ``limit`` due Pending jobs of one half-open type, in claim order, skipping rows other
    claimers hold and paused queues."""
    hot = jobs_hot.c
    where = [
        status_is(hot.Status, PENDING),
        hot.ScheduledAtUtc <= utcnow(),
        hot.Type == bindparam("breaker_type", type_=hot.Type.type),
        hot.Queue.not_in(select(queues.c.Name).where(queues.c.IsPaused == true())),
    ]
    if by_queue:
        where.append(in_list(hot.Queue, bindparam("probe_queues", type_=ListParam(hot.Queue.type))))
    stmt = select(hot.Id).where(*where).order_by(hot.Priority.desc(), hot.ScheduledAtUtc, hot.CreatedAtUtc)
    return claim_lock(stmt.limit(limit), jobs_hot)


@functools.lru_cache(maxsize=8)
def mssql_probe_ids_statement(limit: int, by_queue: bool) -> ClaimPick:
    """SQL Server's :func:`probe_ids_statement`: the claim's own read (the claim index, one queue
    at a time, the same lock order: see statements/claim.py), for one type."""
    from chokaq.storage.statements.claim import CLAIM_ORDER, mssql_due, mssql_queues

    hot = jobs_hot.c
    # MaxWorkers does not hold a probe back (nor does it elsewhere): only a paused queue does.
    queues_ = mssql_queues(by_queue, True, max(1, MAX_ROWS_PER_STATEMENT // limit), "probe_queues")
    branch = mssql_due(limit, hot.Type == bindparam("breaker_type", type_=hot.Type.type))
    return ClaimPick(queues_, branch, ["Id"], CLAIM_ORDER, limit)


@functools.lru_cache(maxsize=2)
def probe_claim_statement(by_key: bool = False) -> ReturningUpdate[Any]:
    """Those jobs Pending -> Fetched for the probing worker (checked Pending again). ``by_key``:
    ``Status + 0 = 0``, so the rows are found by primary key, never through a filtered index."""
    hot = jobs_hot.c
    pending = (
        (hot.Status + literal_column("0")) == literal_column(str(PENDING)) if by_key else status_is(hot.Status, PENDING)
    )
    return (
        update(jobs_hot)
        .where(in_list(hot.Id, bindparam("probe_ids", type_=ListParam(hot.Id.type))), pending)
        .values(
            Status=literal_column(str(FETCHED)),
            WorkerId=bindparam("claim_worker", type_=hot.WorkerId.type),
            LastUpdatedUtc=utcnow(),
        )
        .returning(*hot_record_columns)  # as every claim: not the Logs and Progress columns
    )


def _waiting_too_long(max_job_age: float) -> ColumnElement[bool]:
    hot = jobs_hot.c
    return and_(
        status_is(hot.Status, PENDING),
        hot.Type.in_(blocked_types()),
        hot.CreatedAtUtc < utc_offset(seconds(-max_job_age)),
    )


@functools.lru_cache(maxsize=8)
def expired_ids_statement(max_job_age: float, size: int) -> Select[Any]:
    """The sweep: ids of at most ``size`` Pending jobs older than Retry.MaxJobAge whose type's
    breaker is not closed."""
    return select(jobs_hot.c.Id).where(_waiting_too_long(max_job_age)).limit(size)


EXPIRED_DETAILS = "circuit breaker open for the job type; waited longer than Retry.MaxJobAge"


@functools.lru_cache(maxsize=8)
def expired_move_statements(max_job_age: float) -> MoveStatements:
    """Those ids -> JobsDLQ as CircuitBreakerOpen, inside the database, and FailedTotal: each row
    checked again (still Pending, its breaker still not closed) by the move itself."""
    # Imported here: moves -> leases -> claim -> this module (the claim's filter) would be a cycle.
    from chokaq.storage.statements.moves import move_statements

    def values(columns: Columns) -> dict[str, ColumnElement[Any]]:
        return {
            "FailedAtUtc": utcnow(),
            "FailureReason": literal_column(str(int(FailureReason.CIRCUIT_BREAKER_OPEN))),
            # Literal text: SQL Server would have to guess a bound parameter's type in the copy.
            "ErrorDetails": literal_column(f"'{EXPIRED_DETAILS}'", String),
        }

    chosen = in_list(jobs_hot.c.Id, bindparam("breaker_ids", type_=ListParam(jobs_hot.c.Id.type)))
    return move_statements(jobs_hot, and_(chosen, _waiting_too_long(max_job_age)), jobs_dlq, values, FAILED)
