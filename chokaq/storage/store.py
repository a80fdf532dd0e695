"""The storage facade: transactions, enqueue, the worker's fenced moves and the recovery sweep."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    String,
    Table,
    UnicodeText,
    and_,
    bindparam,
    case,
    cast,
    column,
    delete,
    event,
    exists,
    false,
    func,
    insert,
    literal_column,
    null,
    or_,
    select,
    text,
    true,
    union_all,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.expression import table as sql_table
from ulid import ULID

from chokaq.domain.keys import check_key
from chokaq.domain.models import EnqueueRequest, JobRecord, Lease, QueueInfo, QueueStats, SweepResult
from chokaq.domain.states import FailureReason, JobStatus
from chokaq.settings import StorageSettings
from chokaq.storage.engine import build_engine, is_transient
from chokaq.storage.executor import Executor
from chokaq.storage.lookup import get_job_statement, record_from_union, stored_ids_statement
from chokaq.storage.mssql_shapes import CteUpdate, MoveBatch, lease_rowset
from chokaq.storage.records import hot_record, hot_record_from_values
from chokaq.storage.schema import SCHEMA, jobs_archive, jobs_dlq, jobs_hot, queues, stats_summary
from chokaq.storage.sqlfuncs import (
    MSSQL_CLAIM_HINT,
    ListParam,
    claim_lock,
    in_list,
    lookup_int,
    row_lock,
    seconds,
    utc_offset,
    utcnow,
)

log = logging.getLogger("chokaq.storage")
T = TypeVar("T")

NOTIFY_CHANNEL = "chokaq_jobs"
_LIMITED_QUEUE_TTL = 1.0
# Seconds: how recent an ANALYZE spares a table whose rows merely changed (see refresh_statistics).
STATISTICS_MIN_AGE = 10.0
PENDING, FETCHED, PROCESSING = int(JobStatus.PENDING), int(JobStatus.FETCHED), int(JobStatus.PROCESSING)


def status_is(column: ColumnElement[Any], status: int) -> ColumnElement[bool]:
    """Compare Status with a literal, never a bind parameter.

    The partial (filtered) indexes are defined with ``WHERE Status = n``. A parameterised predicate
    cannot use them: PostgreSQL's generic plans for prepared statements and SQL Server's plans for
    parameterised queries fall back to scanning and sorting every row.
    """
    return column == literal_column(str(int(status)))


def status_in(column: ColumnElement[Any], *statuses: int) -> ColumnElement[bool]:
    return column.in_([literal_column(str(int(s))) for s in statuses])


def _zombie_retry_flag(zombie_retry: bool, cols: Any = jobs_hot.c) -> Any:
    """ZombieRetry as stamped at start: true for the job types whose handlers asked for it."""
    if not zombie_retry:
        return false()
    types = bindparam("zombie_types", type_=ListParam(jobs_hot.c.Type.type))
    return case((in_list(cols.Type, types), true()), else_=false())


def _started_values(zombie_retry: bool, cols: Any = jobs_hot.c) -> dict[str, Any]:
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
        "ZombieRetry": _zombie_retry_flag(zombie_retry, cols),
    }


@functools.lru_cache(maxsize=256)
def _claim_statement(by_queue: bool, limited: bool, limit: int, start: bool = False, zombie_retry: bool = False) -> Any:
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
        values.update(_started_values(zombie_retry))
    return update(jobs_hot).where(jobs_hot.c.Id.in_(select(chosen.c.Id))).values(values).returning(*jobs_hot.c)


@functools.lru_cache(maxsize=256)
def _mssql_claim_statement(
    queue_count: int, limited: bool, limit: int, start: bool = False, zombie_retry: bool = False
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
        ]

    def queue(i: int) -> ColumnElement[bool]:
        return hot.Queue == bindparam(f"claim_queue_{i}", type_=hot.Queue.type)

    cte = sql_table("c", *(column(col.name, col.type) for col in jobs_hot.c))
    values: dict[str, Any] = {
        "Status": literal_column(str(FETCHED)),
        "WorkerId": bindparam("claim_worker", type_=hot.WorkerId.type),
        "LastUpdatedUtc": utcnow(),
    }
    if start:
        values.update(_started_values(zombie_retry, cte.c))
    outputs = [col.name for col in jobs_hot.c]
    if queue_count <= 1:
        chosen = select(*jobs_hot.c).where(*due(*([queue(0)] if queue_count else [])))
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
    chosen = select(*jobs_hot.c).where(hot.Id.in_(select(picked.c.Id)))
    return CteUpdate(chosen, values, outputs, pick=pick.limit(limit))


@functools.lru_cache(maxsize=8)
def _bump_statement(column: str) -> Any:
    col = stats_summary.c[column]
    delta = cast(bindparam("stats_delta", type_=BigInteger()), BigInteger())
    return (
        update(stats_summary)
        .where(stats_summary.c.Queue == bindparam("stats_queue"))
        .values({col: col + delta, stats_summary.c.LastActivityUtc: utcnow()})
    )


@functools.lru_cache(maxsize=8)
def _counter_insert(column: str) -> Any:
    """A new StatsSummary row starting ``column`` at ``stats_delta`` (see :meth:`Storage.bump_stats`)."""
    return insert(stats_summary).values(
        {
            "Queue": bindparam("stats_queue"),
            column: cast(bindparam("stats_delta", type_=BigInteger()), BigInteger()),
            "LastActivityUtc": utcnow(),
        }
    )


@functools.lru_cache(maxsize=32)
def _fence(groups: int, status: int) -> ColumnElement[bool]:
    """JobsHot rows in ``status`` that a worker still owns at exactly the attempt each of its
    leases names.

    Bound by :func:`fence_params`. Leases are grouped by attempt number, so there is one
    statement per count of distinct attempts (nearly always one), not one per batch size.
    ``groups == 0`` is SQL Server's form: a join with one ``OPENJSON ... WITH (Id, Attempt)``
    rowset of all the leases, a primary-key seek per lease (an OR of IN-groups may be a scan).
    """
    if groups < 0:
        raise ValueError("a fence needs at least one lease")
    hot = jobs_hot.c
    # "Status + 0", not "Status = n": the rows are found by primary key. A plain predicate
    # would let the planner scan a whole partial index (every Fetched or Processing job of
    # every worker) for a few ids whenever its statistics underestimate that index.
    owned = and_(
        (hot.Status + literal_column("0")) == literal_column(str(int(status))),
        hot.WorkerId == bindparam("fence_worker", type_=hot.WorkerId.type),
    )
    if groups == 0:
        lease = lease_rowset(hot.Id)
        return and_(hot.Id == lease.c.Id, hot.AttemptCount == lease.c.Attempt, owned)
    return and_(
        owned,
        or_(
            *(
                and_(
                    hot.AttemptCount == bindparam(f"fence_attempt_{i}", type_=hot.AttemptCount.type),
                    in_list(hot.Id, bindparam(f"fence_ids_{i}", type_=ListParam(hot.Id.type))),
                )
                for i in range(groups)
            )
        ),
    )


def fence_params(worker_id: str, leases: Iterable[Lease], dialect: str = "") -> tuple[int, dict[str, Any]]:
    """``(groups, parameters)`` for :func:`_fence` (``groups == 0``: SQL Server's lease rowset)."""
    by_attempt: dict[int, list[str]] = defaultdict(list)
    for lease in leases:
        if lease.worker_id != worker_id:
            raise ValueError("all leases in one move must belong to one worker")
        by_attempt[lease.attempt].append(lease.job_id)
    params: dict[str, Any] = {"fence_worker": worker_id}
    if dialect == "mssql":
        # One pair per job (a job named twice would be copied twice by a join).
        pairs = {job_id: attempt for attempt, ids in by_attempt.items() for job_id in ids}
        params["fence_leases"] = json.dumps([[job_id, attempt] for job_id, attempt in pairs.items()])
        return 0, params
    for i, (attempt, ids) in enumerate(by_attempt.items()):
        params[f"fence_attempt_{i}"] = attempt
        params[f"fence_ids_{i}"] = ids
    return len(by_attempt), params


SourceValues = Callable[[Any], dict[str, ColumnElement[Any]]]


@dataclass(frozen=True)
class MoveStatements:
    """One move between tables, as :meth:`Storage.move` runs it.

    ``copy`` and ``remove`` are two statements run in one transaction with the counter bumped
    after them: the portable form, for SQLite. ``single`` is the same move and its counter as one
    PostgreSQL statement (writable CTEs); run without BEGIN and COMMIT it is one round trip instead
    of five. ``batch`` is SQL Server's one round trip: a T-SQL batch in its own transaction.
    """

    copy: Any
    remove: Any
    single: Any
    counter: str
    batch: Any = None


def move_statements(
    source: Table, where: ColumnElement[bool], target: Table, values: SourceValues, counter: str
) -> MoveStatements:
    """``values(columns)`` gives SQL expressions, over the source row's ``columns``, for target
    columns that the source lacks or that change. ``counter`` is the StatsSummary column to add
    the moved rows to."""
    changed = values(source.c)
    names = [col.name for col in target.c if col.name in changed or col.name in source.c]

    def shaped(columns: Any) -> list[ColumnElement[Any]]:
        extra = values(columns)
        return [extra[n] if n in extra else columns[n] for n in names]

    # The lock keeps a concurrent move (the sweep, an operator) from taking a row between the
    # copy and the delete; without it a job could land in two tables.
    copy = insert(target).from_select(names, row_lock(select(*shaped(source.c)).where(where), source))
    # SQLAlchemy keeps rowcount for UPDATE and DELETE only unless asked.
    copy = copy.execution_options(preserve_rowcount=True)
    remove = delete(source).where(where).returning(source.c.Id, source.c.Queue)

    # PostgreSQL: DELETE ... RETURNING takes exactly the rows this statement removed (a row that
    # another transaction moved first is skipped), and the copy and the counter read those rows.
    moved = delete(source).where(where).returning(*source.c).cte("moved")
    copied = insert(target).from_select(names, select(*shaped(moved.c))).cte("copied")
    # Sorted by queue: concurrent moves then lock counter rows in one order and cannot deadlock.
    # ON CONFLICT goes in as fixed text after the SELECT: SQLAlchemy never caches its PostgreSQL
    # INSERT construct, and compiling this statement on every call cost more than running it.
    per_queue = (
        select(moved.c.Queue, func.count(), utcnow())
        .group_by(moved.c.Queue)
        .order_by(moved.c.Queue)
        .suffix_with(
            f'ON CONFLICT ("Queue") DO UPDATE SET "{counter}" = "StatsSummary"."{counter}" + excluded."{counter}", '
            '"LastActivityUtc" = excluded."LastActivityUtc"',
            dialect="postgresql",
        )
    )
    upsert = insert(stats_summary).from_select(["Queue", counter, "LastActivityUtc"], per_queue)
    single = select(moved.c.Id, moved.c.Queue).add_cte(copied, upsert.cte("counted"))
    batch = MoveBatch(source, target, names, row_lock(select(*shaped(source.c)).where(where), source), counter)
    return MoveStatements(copy, remove, single, counter, batch)


@functools.lru_cache(maxsize=32)
def _complete_statements(groups: int) -> MoveStatements:
    def values(columns: Any) -> dict[str, ColumnElement[Any]]:
        return {
            "FinishedAtUtc": utcnow(),
            "DurationMs": lookup_int(columns.Id, bindparam("durations", type_=UnicodeText())),
        }

    return move_statements(jobs_hot, _fence(groups, PROCESSING), jobs_archive, values, "SucceededTotal")


@functools.lru_cache(maxsize=4)
def _fail_statements(groups: int = 1, details: bool = True) -> MoveStatements:
    def values(columns: Any) -> dict[str, ColumnElement[Any]]:
        return {
            "FailedAtUtc": utcnow(),
            "FailureReason": bindparam("failure_reason", type_=jobs_dlq.c.FailureReason.type),
            # No details: NULL in the text, not a NULL parameter (see _release_statement).
            "ErrorDetails": bindparam("error_details", type_=jobs_dlq.c.ErrorDetails.type) if details else null(),
        }

    return move_statements(jobs_hot, _fence(groups, PROCESSING), jobs_dlq, values, "FailedTotal")


@functools.lru_cache(maxsize=64)
def _start_statement(groups: int, zombie_retry: bool) -> Any:
    hot = jobs_hot.c
    paused = exists().where(queues.c.Name == hot.Queue, queues.c.IsPaused == true())
    return (
        update(jobs_hot)
        .where(_fence(groups, FETCHED), ~paused)
        .values(_started_values(zombie_retry))
        # Only what changed: the caller already holds the rest of each row.
        .returning(hot.Id, hot.AttemptCount, hot.StartedAtUtc, hot.HeartbeatUtc, hot.LastUpdatedUtc, hot.ZombieRetry)
    )


@functools.lru_cache(maxsize=32)
def _heartbeat_statement(groups: int) -> Any:
    hot = jobs_hot.c
    return (
        update(jobs_hot)
        .where(_fence(groups, PROCESSING))
        .values(HeartbeatUtc=utcnow())
        .returning(hot.Id)
    )


@functools.lru_cache(maxsize=32)
def _release_statement(groups: int) -> Any:
    hot = jobs_hot.c
    return (
        update(jobs_hot)
        .where(_fence(groups, FETCHED))
        # NULL in the text: a NULL parameter costs pyodbc a describe round trip on SQL Server.
        .values(Status=literal_column(str(PENDING)), WorkerId=null(), LastUpdatedUtc=utcnow())
        .returning(hot.Id)
    )


@functools.lru_cache(maxsize=32)
def _retry_statement(groups: int) -> Any:
    """Processing -> Pending, due ``retry_delay`` seconds from now."""
    return (
        update(jobs_hot)
        .where(_fence(groups, PROCESSING))
        .values(
            Status=literal_column(str(PENDING)),
            WorkerId=null(),
            HeartbeatUtc=null(),
            ScheduledAtUtc=utc_offset(seconds(name="retry_delay")),
            LastUpdatedUtc=utcnow(),
        )
        .returning(jobs_hot.c.Queue)
    )


@dataclass(frozen=True)
class SweepStatements:
    """The sweep's statements, each naming at most ``size`` jobs (see :meth:`Storage.sweep`)."""

    recover: Any  # Fetched past the timeout -> Pending
    retry: Any  # expired, ZombieRetry and attempts left -> Pending
    zombie_ids: Any  # the ids of expired jobs bound for the DLQ
    zombies: MoveStatements  # those ids -> DLQ (parameter ``zombie_ids``), checked again


def sweep_statements(fetched_timeout: float, zombie_timeout: float, max_attempts: int, size: int) -> SweepStatements:
    hot = jobs_hot.c

    def first(where: ColumnElement[bool]) -> Any:
        """The ids of at most ``size`` rows matching ``where``: any of them, so the database
        reads them in the order of the partial index that serves ``where``, and stops."""
        return select(hot.Id).where(where).limit(size)

    abandoned = and_(status_is(hot.Status, FETCHED), hot.LastUpdatedUtc < utc_offset(seconds(-fetched_timeout)))
    recover = (
        update(jobs_hot)
        .where(hot.Id.in_(first(abandoned)), abandoned)
        .values(Status=literal_column(str(PENDING)), WorkerId=null(), LastUpdatedUtc=utcnow())
    )
    per_queue = select(queues.c.ZombieTimeoutSeconds).where(queues.c.Name == hot.Queue).scalar_subquery()
    timeout = func.coalesce(per_queue, seconds(zombie_timeout))
    # Re-evaluated by the moving statement itself: a heartbeat or a completion that commits
    # first makes the row no longer match, so a live job is never taken (River #1302).
    expired = and_(
        status_is(hot.Status, PROCESSING),
        func.coalesce(hot.HeartbeatUtc, hot.LastUpdatedUtc) < utc_offset(-timeout),
    )
    retryable = and_(hot.ZombieRetry == true(), hot.AttemptCount < literal_column(str(int(max_attempts))))
    retry = (
        update(jobs_hot)
        .where(hot.Id.in_(first(and_(expired, retryable))), expired, retryable)
        .values(
            Status=literal_column(str(PENDING)),
            WorkerId=null(),
            HeartbeatUtc=null(),
            ScheduledAtUtc=utcnow(),
            LastUpdatedUtc=utcnow(),
        )
        .returning(hot.Queue)
    )
    # Ids first, then the move by those ids (with ``expired`` checked again): the copy and the
    # delete then name the same rows although the clock moves between them.
    chosen = in_list(hot.Id, bindparam("zombie_ids", type_=ListParam(hot.Id.type)))
    zombies = _zombie_statements(and_(chosen, expired, ~retryable))
    return SweepStatements(recover, retry, first(and_(expired, ~retryable)), zombies)


def _zombie_statements(where: ColumnElement[bool]) -> MoveStatements:
    """Processing -> DLQ for jobs whose heartbeat expired, moved inside the database."""

    def values(columns: Any) -> dict[str, ColumnElement[Any]]:
        def text_of(expr: Any, default: str) -> Any:
            return func.coalesce(expr, literal_column(f"'{default}'", String))

        # Literal text, not parameters: SQL Server would have to guess the type of a bound
        # operand of "+". Concatenation renders as + on SQL Server and || elsewhere.
        details = (
            literal_column("'Zombie detected: heartbeat expired (last heartbeat '", String)
            + text_of(cast(columns.HeartbeatUtc, String(40)), "never")
            + literal_column("' UTC, worker '", String)
            + text_of(columns.WorkerId, "unknown")
            + literal_column("', attempt '", String)
            + cast(columns.AttemptCount, String(12))
            + literal_column("')'", String)
        )
        return {
            "FailedAtUtc": utcnow(),
            "FailureReason": literal_column(str(int(FailureReason.ZOMBIE))),
            "ErrorDetails": details,
        }

    return move_statements(jobs_hot, where, jobs_dlq, values, "FailedTotal")


def _value_or_null(value: Any) -> Any:
    """``value`` as a parameter, or NULL in the statement text when it is None."""
    return null() if value is None else value


def _autocommit_twin(engine: Engine) -> Engine | None:
    """SQL Server: a second pool, over the same connection set-up, whose connections stay in
    autocommit for their whole life, for the single-statement hot path.

    Switching a pooled connection to AUTOCOMMIT for one statement costs a
    ``SET TRANSACTION ISOLATION LEVEL`` round trip when SQLAlchemy resets it on its way back to
    the pool. PostgreSQL switches client-side and keeps the shared pool.
    """
    if engine.dialect.name != "mssql":
        return None
    pool = engine.pool.recreate()  # same creator and connect-time set-up, its own connections

    @event.listens_for(pool, "connect")
    def _autocommit(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.autocommit = True

    return Engine(pool, engine.dialect, engine.url, echo=engine.echo)


@dataclass
class Ambiguity:
    ambiguous: bool = False


def _may_have_committed(exc: BaseException) -> bool:
    """A failure that may have come after the server committed: the connection broke or timed out.
    Deadlocks, serialisation failures and other answers from the server rolled back for sure."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate:
        return sqlstate.startswith("08")  # connection exceptions
    return True


def new_job_id() -> str:
    # Time-ordered ids keep SQL Server's clustered primary key appending, not splitting pages.
    return str(ULID())


@dataclass(frozen=True, slots=True)
class _ClaimOptions:
    start: bool
    zombie_retry_types: tuple[str, ...]
    skip: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Completion:
    lease: Lease
    duration_ms: int


@dataclass(frozen=True, slots=True)
class StartResult:
    started: list[JobRecord]
    released: list[str]
    lost: list[str]


class Storage:
    """All database access. Thread-safe: every call takes its own connection from the pool."""

    def __init__(
        self,
        url: str,
        *,
        settings: StorageSettings | None = None,
        engine: Engine | None = None,
        echo: bool = False,
    ) -> None:
        self.url = url
        self.settings = settings or StorageSettings()
        self.engine = engine or build_engine(
            url,
            pool_size=self.settings.pool_size,
            echo=echo,
            command_timeout=self.settings.command_timeout,
            connect_timeout=self.settings.connect_timeout,
            statement_timeout=self.settings.statement_timeout,
        )
        self.dialect = self.engine.dialect.name
        self._autocommit = _autocommit_twin(self.engine)
        # The hot path's own driver connections (see executor.py); SQL Server's come from the
        # autocommit twin, already in autocommit.
        translate = self.engine.get_execution_options().get("schema_translate_map")
        self._executor = Executor(self._autocommit or self.engine, translate)
        self._known_queues: set[str] = set()
        self._limited_cache: tuple[float, list[str]] = (0.0, [])
        # Test hook: called with the operation name before each transaction attempt.
        self.fault_injector: Callable[[str], None] | None = None
        # Same-process wake-ups (SQLite, or any database before NOTIFY arrives): workers in this
        # process start new work at once instead of at their next poll.
        self._enqueue_listeners: list[Callable[[], None]] = []
        # After-commit announcers for other processes (the Functions doorbell): see add_announcer.
        self._announcers: list[Callable[[Mapping[str, float] | None], None]] = []
        self._local = threading.local()  # per-call ambiguity, see _retrying
        # (op, job id, attempt) of retry/reschedule calls that raised after a write that may have
        # committed: a later call for them may recognise its own success (see _unheard_move).
        self._unheard: set[tuple[str, str, int]] = set()

    # What this database offers the worker, asked by name rather than by dialect outside storage/.
    @property
    def supports_notify(self) -> bool:
        """LISTEN/NOTIFY wake-ups (see storage/notify.py): PostgreSQL."""
        return self.dialect == "postgresql"

    @property
    def supports_statistics_refresh(self) -> bool:
        """Whether :meth:`refresh_statistics` can ever do anything here: PostgreSQL."""
        return self.dialect == "postgresql"

    # ------------------------------------------------------------------ transactions
    def close(self) -> None:
        self._executor.close()
        if self._autocommit is not None:
            self._autocommit.dispose()
        self.engine.dispose()

    def write(self, fn: Callable[[Connection], T], *, op: str = "write") -> T:
        """Run ``fn`` in one write transaction, replaying it whole on transient errors."""
        return self._run(fn, op=op, readonly=False)

    def read(self, fn: Callable[[Connection], T], *, op: str = "read") -> T:
        return self._run(fn, op=op, readonly=True)

    def write_one(self, fn: Callable[[Connection], T], *, op: str) -> T:
        """Run ``fn``, which issues exactly one writing statement, without an explicit transaction.

        The statement is atomic by itself; leaving out BEGIN and COMMIT saves two of its three round
        trips on the worker's hot path (claim, start, heartbeat). SQLite keeps its BEGIN IMMEDIATE.
        """
        return self._run(fn, op=op, readonly=False, single=True)

    def _driver(self, stmt: Any, params: dict[str, Any], *, op: str) -> list[tuple[Any, ...]]:
        """One hot-path writing statement straight through the driver (see executor.py), replayed
        on transient errors and watched for lost replies exactly as :meth:`write_one` does."""

        def sending() -> None:
            self._local.sent = True  # from here on a failure may come after the server ran it

        return self._retrying(lambda: self._executor.run(stmt, params, sending=sending), op=op)

    def _run(self, fn: Callable[[Connection], T], *, op: str, readonly: bool, single: bool = False) -> T:
        def attempt() -> T:
            if single and self._autocommit is not None:
                with self._autocommit.connect() as conn:
                    # From here on a failure may come after the server ran the statement.
                    self._local.sent = not readonly
                    return fn(conn)
            with self.engine.connect() as raw:
                self._local.sent = not readonly
                if single and self.dialect != "sqlite":
                    return fn(raw.execution_options(isolation_level="AUTOCOMMIT"))
                conn = raw.execution_options(chokaq_readonly=True) if readonly else raw
                with conn.begin():
                    return fn(conn)

        return self._retrying(attempt, op=op)

    def _retrying(self, once: Callable[[], T], *, op: str) -> T:
        attempts = self.settings.transient_retries
        self._local.replaying = False
        for attempt in range(attempts + 1):
            self._local.sent = False
            try:
                if self.fault_injector is not None:
                    self.fault_injector(op)
                return once()
            except (DBAPIError, OperationalError) as exc:
                if self._local.sent and self.dialect != "sqlite" and _may_have_committed(exc):
                    # The connection died under a write: it may have committed, and the reply was
                    # lost. The replay cannot tell; callers that care reconcile (see ambiguity()).
                    self._local.ambiguous = True
                    self._local.replaying = True  # the attempts after this one: see _replaying
                if attempt >= attempts or not is_transient(exc):
                    raise
                delay = min(0.05 * (2**attempt), 2.0) * (0.5 + random.random())
                log.warning(
                    "transient database error in %s (attempt %d), retrying in %.2fs: %s",
                    op,
                    attempt + 1,
                    delay,
                    str(exc).splitlines()[0],
                )
                time.sleep(delay)
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def ambiguity(self) -> Iterator[Ambiguity]:
        """Tells whether a write in the block, on this thread, failed in a way that may have
        committed (a lost reply): the block's outcome may then include changes it never saw.
        Blocks nest: an enclosing block also learns what happened in an inner one."""
        outer = bool(getattr(self._local, "ambiguous", False))
        self._local.ambiguous = False
        seen = Ambiguity()
        try:
            yield seen
        finally:
            seen.ambiguous = bool(getattr(self._local, "ambiguous", False))
            self._local.ambiguous = outer or seen.ambiguous

    def _unheard_move(self, op: str, leases: Sequence[Lease], run: Callable[[], T]) -> tuple[T, bool]:
        """Run a move; also say whether its rows may have moved by an earlier try of it whose reply
        was lost: in this call, or in an earlier call for the same leases that raised so. Only
        then may the caller take "already where the move puts it" for its own success: a job that
        looks so for another reason (the sweep retried it as a zombie, an operator resurrected it)
        was lost by this worker, and that stays a conflict."""
        keys = [(op, lease.job_id, lease.attempt) for lease in leases]
        try:
            with self.ambiguity() as seen:
                result = run()
        except Exception:
            if seen.ambiguous:  # set when the block is left, exception or not
                self._unheard.update(keys)
            raise
        earlier = any(k in self._unheard for k in keys)
        self._unheard.difference_update(keys)
        return result, seen.ambiguous or earlier

    def _replaying(self) -> bool:
        """Inside a transaction function: an earlier attempt of this same call failed in a way that
        may have committed (see _retrying). Only enqueues ask: they must not store twice."""
        return bool(getattr(self._local, "replaying", False))

    def _stored(self, c: Connection, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are stored, in any of the three tables (one statement)."""
        return {r[0] for r in c.execute(stored_ids_statement(), {"stored_ids": list(ids)})}

    def on_enqueue(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` after this process commits new Pending work. Returns an unsubscriber."""
        self._enqueue_listeners.append(callback)
        return lambda: self._enqueue_listeners.remove(callback)

    def add_announcer(self, announcer: Callable[[Mapping[str, float] | None], None]) -> Callable[[], None]:
        """Call ``announcer`` after this process commits new Pending work, with ``{queue: seconds
        until its first new job is due}``, or None when the queues are not known (a resurrect).

        It runs in the committing thread after the commit, so it must be quick; whatever it raises is
        logged and dropped: the jobs are stored, and an announcement is only a hint to look sooner.
        Returns an unsubscriber."""
        self._announcers.append(announcer)
        return lambda: self._announcers.remove(announcer)

    def announce(self, due: Mapping[str, float] | None = None) -> None:
        for callback in list(self._enqueue_listeners):
            callback()
        for announcer in list(self._announcers):
            try:
                announcer(due)
            except Exception:
                log.exception("enqueue announcer failed (the jobs are stored)")

    def ping(self) -> datetime:
        """Round trip to the database; returns its UTC clock."""
        return self.read(self.db_now, op="ping")

    def db_now(self, conn: Connection) -> datetime:
        value: datetime = conn.execute(select(utcnow())).scalar_one()
        return value

    # ------------------------------------------------------------------ schema
    def upgrade(self) -> list[int]:
        from chokaq.storage.migrations import upgrade

        # The migration opens its own transaction (it takes the schema lock first); replay it on
        # transient errors like any other.
        return self._retrying(lambda: upgrade(self.engine), op="upgrade")

    # ------------------------------------------------------------------ helpers
    def bind(self, conn: Connection) -> Connection:
        """Prepare a caller's connection for our tables (SQLite has no schemas)."""
        if conn.dialect.name == "sqlite":
            conn.execution_options(schema_translate_map={SCHEMA: None})
        return conn

    def ensure_queue(self, conn: Connection, name: str) -> None:
        if name in self._known_queues:
            return
        if conn.execute(select(queues.c.Name).where(queues.c.Name == name)).first() is None:
            try:
                with conn.begin_nested():
                    conn.execute(insert(queues).values(Name=name, LastUpdatedUtc=utcnow()))
            except IntegrityError:
                pass  # another process created it first
        self._known_queues.add(name)

    def bump_stats(self, conn: Connection, column: str, per_queue: Counter[str], sign: int = 1) -> None:
        """Add to one StatsSummary counter per queue, creating the row when it is missing."""
        bump = _bump_statement(column)
        # Sorted: concurrent transactions lock counter rows in one order and cannot deadlock.
        for queue, n in sorted(per_queue.items()):
            if not n:
                continue
            params = {"stats_queue": queue, "stats_delta": sign * n}
            if conn.execute(bump, params).rowcount:
                continue
            try:
                with conn.begin_nested():
                    conn.execute(
                        insert(stats_summary).values({"Queue": queue, column: sign * n, "LastActivityUtc": utcnow()})
                    )
            except IntegrityError:
                conn.execute(bump, params)  # another transaction created it first

    @staticmethod
    def _notify(conn: Connection, queue: str) -> None:
        if conn.dialect.name == "postgresql":
            conn.execute(select(func.pg_notify(NOTIFY_CHANNEL, queue)))

    # ------------------------------------------------------------------ enqueue
    def enqueue(
        self, req: EnqueueRequest, *, conn: Connection | None = None, job_id: str | None = None
    ) -> tuple[str, bool]:
        """Store a job. Returns ``(id, created)``; a live duplicate idempotency key returns the
        existing id with ``created=False``. With ``conn`` the job joins the caller's transaction.
        ``job_id``: the id to store it under (made up here when not given)."""
        job_id = job_id or new_job_id()

        def work(c: Connection) -> tuple[str, bool]:
            if conn is None and self._replaying() and self._stored(c, [job_id]):
                # The first attempt committed and its reply was lost; the job may have run and
                # left JobsHot since, so inserting again could store it twice.
                return job_id, True
            self.ensure_queue(c, req.queue)
            stmt = insert(jobs_hot).values(
                Id=job_id,
                Queue=req.queue,
                Type=req.type,
                Payload=req.payload,
                # NULL in the text, not a NULL parameter (a describe round trip on SQL Server).
                Tags=_value_or_null(req.tags),
                IdempotencyKey=_value_or_null(req.idempotency_key),
                Priority=req.priority,
                Status=PENDING,
                AttemptCount=0,
                ScheduledAtUtc=utc_offset(seconds(req.delay_seconds)) if req.delay_seconds else utcnow(),
                CreatedAtUtc=utcnow(),
                LastUpdatedUtc=utcnow(),
                CreatedBy=_value_or_null(req.created_by),
                ZombieRetry=False,
            )
            if req.idempotency_key is None:
                c.execute(stmt)
            else:
                by_key = select(jobs_hot.c.Id).where(jobs_hot.c.IdempotencyKey == req.idempotency_key)
                existing = c.execute(by_key).scalar()
                if existing is not None:
                    # Our own id: a replay after a lost COMMIT reply meets the job this call stored.
                    return existing, existing == job_id
                try:
                    with c.begin_nested():
                        c.execute(stmt)
                except IntegrityError:
                    existing = c.execute(by_key).scalar()
                    if existing is None:
                        raise
                    return existing, existing == job_id
            self._notify(c, req.queue)
            return job_id, True

        if conn is not None:
            return work(self.bind(conn))
        result = self.write(work, op="enqueue")
        self.announce({req.queue: float(req.delay_seconds)})
        return result

    def enqueue_many(self, reqs: Sequence[EnqueueRequest]) -> list[str]:
        """Bulk insert, in transactions of at most ``Storage.CleanupBatchSize`` jobs each, so a
        large batch never holds its locks and log space in one transaction. Jobs with
        idempotency keys go one by one. Should a batch fail for good, the batches before it stay
        enqueued and the error is raised.
        """
        ids = [new_job_id() for _ in reqs]
        size = self.settings.cleanup_batch_size
        # SQL Server: RETURNING makes SQLAlchemy send multi-row VALUES batches (at most 2,099
        # parameters each) typed by setinputsizes, NVARCHAR(max) for the payload. A plain
        # executemany goes through fast_executemany, which sends no types: pyodbc then has the
        # server describe every parameter, and binds VARCHAR(255) when that fails.
        stmt = insert(jobs_hot).values(
            Status=literal_column(str(PENDING)),
            AttemptCount=literal_column("0"),
            ZombieRetry=false(),
            ScheduledAtUtc=utc_offset(seconds(name="delay")),
            CreatedAtUtc=utcnow(),
            LastUpdatedUtc=utcnow(),
        )
        if self.dialect == "mssql":
            stmt = stmt.returning(jobs_hot.c.Id)

        # Per batch, what its last attempt answered for keyed jobs (the existing id under a key).
        keyed: dict[int, str] = {}

        def batch(start: int) -> Callable[[Connection], list[str]]:
            def work(c: Connection) -> list[str]:
                part = reqs[start : start + size]
                out = ids[start : start + size]
                if self._replaying() and self._stored(c, out):
                    # One transaction per batch: any of its ids stored means the attempt whose
                    # reply was lost committed all of it (its jobs may have run and moved on since).
                    return [keyed.get(start + i, job_id) for i, job_id in enumerate(out)]
                rows = []
                for i, r in enumerate(part):
                    self.ensure_queue(c, r.queue)
                    if r.idempotency_key is not None:
                        out[i] = keyed[start + i] = self.enqueue(r, conn=c, job_id=out[i])[0]
                        continue
                    rows.append(
                        {
                            "Id": out[i],
                            "Queue": r.queue,
                            "Type": r.type,
                            "Payload": r.payload,
                            "Tags": r.tags,
                            "Priority": r.priority,
                            "CreatedBy": r.created_by,
                            "delay": float(r.delay_seconds),
                        }
                    )
                if rows:
                    c.execute(stmt, rows)
                for q in sorted({r.queue for r in part}):
                    self._notify(c, q)
                return out

            return work

        result: list[str] = []
        for start in range(0, len(reqs), size):
            part = reqs[start : start + size]
            result += self.write(batch(start), op="enqueue_many")
            due: dict[str, float] = {}
            for r in part:
                due[r.queue] = min(due.get(r.queue, float(r.delay_seconds)), float(r.delay_seconds))
            self.announce(due)
        return result

    # ------------------------------------------------------------------ fetch and start
    def _claim(
        self,
        conn: Connection,
        worker_id: str,
        limit: int,
        queue_names: Sequence[str] | None,
        *,
        limited: bool,
        claim: _ClaimOptions,
    ) -> list[JobRecord]:
        query = self._claim_query(conn.dialect.name, worker_id, limit, queue_names, limited=limited, claim=claim)
        return [] if query is None else [hot_record(r) for r in conn.execute(*query).all()]

    @staticmethod
    def _claim_query(
        dialect: str,
        worker_id: str,
        limit: int,
        queue_names: Sequence[str] | None,
        *,
        limited: bool,
        claim: _ClaimOptions,
    ) -> tuple[Any, dict[str, Any]] | None:
        """The claim statement and its parameters (None: nothing to claim)."""
        if limit <= 0:
            return None
        params: dict[str, Any] = {"claim_worker": worker_id, "claim_skip": list(claim.skip)}
        if queue_names:
            params["claim_queues"] = list(queue_names)
        zombie_retry = claim.start and bool(claim.zombie_retry_types)
        if zombie_retry:
            params["zombie_types"] = list(claim.zombie_retry_types)
        stmt: Any
        if dialect == "mssql":
            params.pop("claim_queues", None)
            for i, name in enumerate(queue_names or ()):
                params[f"claim_queue_{i}"] = name
            stmt = _mssql_claim_statement(len(queue_names or ()), limited, limit, claim.start, zombie_retry)
        else:
            stmt = _claim_statement(bool(queue_names), limited, limit, claim.start, zombie_retry)
        return stmt, params

    def _limited_queues(self) -> list[str]:
        """Queues with MaxWorkers, re-read at most every second: the list only decides which
        queues get a locked claim; the main claim excludes them exactly, by subquery."""
        stamp, names = self._limited_cache
        if time.monotonic() - stamp > _LIMITED_QUEUE_TTL:

            def work(c: Connection) -> list[str]:
                rows = c.execute(
                    select(queues.c.Name)
                    .where(queues.c.MaxWorkers.isnot(None), queues.c.IsPaused == false())
                    .order_by(queues.c.Name)
                ).all()
                return [r[0] for r in rows]

            names = self._run(work, op="limited_queues", readonly=True, single=True)
            self._limited_cache = (time.monotonic(), names)
        return names

    def fetch(
        self,
        worker_id: str,
        limit: int,
        queue_names: Sequence[str] | None = None,
        *,
        start: bool = False,
        zombie_retry_types: Collection[str] = (),
        skip: Collection[str] = (),
    ) -> list[JobRecord]:
        """Claim up to ``limit`` due Pending jobs (Pending -> Fetched) for ``worker_id``.

        ``start``: Pending -> Processing instead, for jobs the worker starts at once (attempt
        counted, heartbeat and ZombieRetry stamped as by :meth:`start`). ``skip``: ids never to
        claim (the worker's own runs that are still alive).

        Paused queues are skipped. Queues with MaxWorkers are claimed separately under a lock on
        their queue row, so the count of their Fetched and Processing jobs never passes the limit.
        """
        opts = _ClaimOptions(start, tuple(zombie_retry_types), tuple(skip))
        query = self._claim_query(self.dialect, worker_id, limit, queue_names, limited=False, claim=opts)
        claimed = [] if query is None else [hot_record_from_values(r) for r in self._driver(*query, op="fetch")]
        limited = [n for n in self._limited_queues() if not queue_names or n in queue_names]

        def claim_limited(c: Connection) -> list[JobRecord]:
            more: list[JobRecord] = []
            for name in limited:
                room = limit - len(claimed) - len(more)
                if room <= 0:
                    break
                locked = c.execute(
                    row_lock(select(queues.c.MaxWorkers, queues.c.IsPaused).where(queues.c.Name == name), queues)
                ).first()
                if locked is None or locked.IsPaused or locked.MaxWorkers is None:
                    continue
                active = c.execute(
                    select(func.count())
                    .select_from(jobs_hot)
                    .where(jobs_hot.c.Queue == name, status_in(jobs_hot.c.Status, FETCHED, PROCESSING))
                ).scalar_one()
                allowance = int(locked.MaxWorkers) - int(active)
                more += self._claim(c, worker_id, min(room, allowance), [name], limited=True, claim=opts)
            return more

        if limited and len(claimed) < limit:
            try:
                claimed += self.write(claim_limited, op="fetch_limited")
            except Exception:
                if not claimed:
                    raise
                # The main claim has committed: raising now would strand its jobs Fetched or
                # Processing under this worker with nobody holding them. Start what it got.
                log.warning("claim of queues with MaxWorkers failed; keeping the main claim's jobs", exc_info=True)
        # RETURNING / OUTPUT rows come in no particular order; the buffer starts them in claim order.
        claimed.sort(key=lambda j: (-(j.priority or 0), j.scheduled_at_utc or 0, j.created_at_utc or 0))
        return claimed

    def start(self, worker_id: str, jobs: Sequence[JobRecord], zombie_retry_types: Collection[str] = ()) -> StartResult:
        """Fetched -> Processing for jobs this worker fetched: the last ownership check before user
        code runs. The records of the jobs that started are updated in place and returned; jobs
        whose queue was paused meanwhile are released to Pending right after.
        """
        if not jobs:
            return StartResult([], [], [])
        leases = [j.lease for j in jobs]
        groups, params = fence_params(worker_id, leases, self.dialect)
        if zombie_retry_types:
            params["zombie_types"] = list(zombie_retry_types)
        stmt = _start_statement(groups, bool(zombie_retry_types))
        by_id = {j.id: j for j in jobs}
        # The new state of each started job, written to the caller's records only once the whole
        # call has succeeded: a follow-up read or release that fails sends the batch back to the
        # worker's buffer, and records already saying Processing at the next attempt would then
        # fence the retried start out (the job stranded Processing, never run).
        fresh: dict[str, tuple[int, Any, Any, Any, bool]] = {}
        for job_id, attempt, started_at, heartbeat, updated, zombie_retry in self._driver(stmt, params, op="start"):
            fresh[job_id] = (attempt, started_at, heartbeat, updated, bool(zombie_retry))
        rest = [lease for lease in leases if lease.job_id not in fresh]
        if rest:
            # A replay after a lost reply finds its own start done: Processing under this worker at
            # the next attempt. Nobody ran them; they start now, attempt counted once.
            for row in self._started_by(worker_id, rest):
                fresh[row.id] = (
                    row.attempt_count,
                    row.started_at_utc,
                    row.heartbeat_utc,
                    row.last_updated_utc,
                    bool(row.zombie_retry),
                )
            rest = [lease for lease in rest if lease.job_id not in fresh]
        released = self.release(worker_id, rest) if rest else []
        lost = [lease.job_id for lease in rest if lease.job_id not in set(released)]
        started = []
        for job_id, (attempt, started_at, heartbeat, updated, zombie_retry) in fresh.items():
            # Updated in place: the caller's records are its own fetched copies.
            job = by_id[job_id]
            job.status = JobStatus.PROCESSING
            job.attempt_count = attempt
            job.started_at_utc = started_at
            job.heartbeat_utc = heartbeat
            job.last_updated_utc = updated
            job.zombie_retry = zombie_retry
            started.append(job)
        return StartResult(started, released, lost)

    def _started_by(self, worker_id: str, leases: Sequence[Lease]) -> list[JobRecord]:
        by_id = {lease.job_id: lease for lease in leases}
        hot = jobs_hot.c
        query = select(jobs_hot).where(
            hot.Id.in_(list(by_id)), status_is(hot.Status, PROCESSING), hot.WorkerId == worker_id
        )
        rows = self.read(lambda c: [hot_record(r) for r in c.execute(query).all()], op="recognise")
        return [r for r in rows if r.attempt_count == by_id[r.id].attempt + 1]

    def _release(self, c: Connection, worker_id: str, leases: Sequence[Lease]) -> list[str]:
        groups, params = fence_params(worker_id, leases, c.dialect.name)
        return [r[0] for r in c.execute(_release_statement(groups), params)]

    def release(self, worker_id: str, leases: Sequence[Lease]) -> list[str]:
        """Fetched -> Pending for jobs this worker reserved but will not start (shutdown)."""
        if not leases:
            return []
        return self.write_one(lambda c: self._release(c, worker_id, leases), op="release")

    # ------------------------------------------------------------------ while running
    def heartbeat(self, worker_id: str, leases: Sequence[Lease]) -> set[str]:
        """One statement for all of a worker's running jobs. Returns the ids still owned."""
        if not leases:
            return set()

        groups, params = fence_params(worker_id, leases, self.dialect)
        return {r[0] for r in self._driver(_heartbeat_statement(groups), params, op="heartbeat")}

    # ------------------------------------------------------------------ finishing moves
    def move_rows(
        self,
        c: Connection,
        source: Table,
        where: ColumnElement[bool],
        target: Table,
        changes: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        stamps: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Delete matching rows from ``source`` and insert them into ``target``: the columns both
        tables have are copied, ``changes(row)`` overrides some, ``stamps`` are SQL expressions.

        DELETE ... RETURNING (OUTPUT DELETED.* on SQL Server) hands back exactly the rows this
        transaction removed, so a row that another transaction moved first is never copied.
        """
        rows = [dict(r._mapping) for r in c.execute(delete(source).where(where).returning(*source.c)).all()]
        if rows:
            shared = [col.name for col in target.c if col.name in source.c and col.name not in (stamps or {})]
            copy = insert(target).values(**(stamps or {}))
            if c.dialect.name == "mssql":
                # Typed multi-row VALUES instead of untyped fast_executemany (see enqueue_many).
                copy = copy.returning(target.c.Id)
            c.execute(copy, [{**{k: r[k] for k in shared}, **(changes(r) if changes else {})} for r in rows])
        return rows

    def move_in_db(self, c: Connection, move: MoveStatements, params: dict[str, Any]) -> list[tuple[str, str]]:
        """Move rows like :meth:`move_rows`, but without carrying them through Python: copy them
        under a row lock, then delete them (the portable form of :class:`MoveStatements`).

        The worker's hot path uses this: shipping every payload out and back in cost more client
        time than the rest of a job's bookkeeping. Returns ``(Id, Queue)`` of each moved row.
        """
        copied = c.execute(move.copy, params).rowcount
        moved = [(r[0], r[1]) for r in c.execute(move.remove, params)]
        if copied != len(moved):
            # Rolls the whole transaction back: nothing is half-moved.
            raise RuntimeError(f"move: copied {copied} rows but deleted {len(moved)}")
        return moved

    def move(self, move: MoveStatements, params: dict[str, Any], *, op: str) -> list[tuple[str, str]]:
        """Run a move and bump its counter atomically. Returns ``(Id, Queue)`` of each moved row."""
        if self.dialect == "postgresql":
            return [(r[0], r[1]) for r in self._driver(move.single, params, op=op)]
        if self.dialect == "mssql":
            return [(r[0], r[1]) for r in self._driver(move.batch, params, op=op)]
        return self._retrying(lambda: self._move_sqlite(move, params), op=op)

    def _move_sqlite(self, move: MoveStatements, params: dict[str, Any]) -> list[tuple[str, str]]:
        """:meth:`move_in_db` and :meth:`bump_stats` in one transaction, through the driver.
        Under BEGIN IMMEDIATE no other writer can create a counter row between the bump and its insert."""
        with self._executor.transaction(sending=lambda: None) as tx:
            copied = tx.run(move.copy, params)[1]
            moved = [(r[0], r[1]) for r in tx.run(move.remove, params)[0]]
            if copied != len(moved):
                # Rolls the whole transaction back: nothing is half-moved.
                raise RuntimeError(f"move: copied {copied} rows but deleted {len(moved)}")
            for queue, n in sorted(Counter(q for _, q in moved).items()):
                counted = {"stats_queue": queue, "stats_delta": n}
                if not tx.run(_bump_statement(move.counter), counted)[1]:
                    tx.run(_counter_insert(move.counter), counted)
        return moved

    def complete(self, worker_id: str, done: Sequence[Completion]) -> set[str]:
        """Processing -> Archive for a batch of successes, in one transaction."""
        if not done:
            return set()
        groups, params = fence_params(worker_id, [d.lease for d in done], self.dialect)
        params["durations"] = json.dumps({d.lease.job_id: d.duration_ms for d in done})
        moved = {job_id for job_id, _ in self.move(_complete_statements(groups), params, op="complete")}
        missing = [d.lease for d in done if d.lease.job_id not in moved]
        return moved | self._already(jobs_archive, missing) if missing else moved

    @staticmethod
    def dlq_shape(
        reason: FailureReason, details: str | None, actor: str | None = None
    ) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """What a job gets on its way into the DLQ."""

        def shape(r: dict[str, Any]) -> dict[str, Any]:
            extra = {"FailureReason": int(reason), "ErrorDetails": details}
            return {**extra, "LastModifiedBy": actor} if actor is not None else extra

        return shape

    def fail(self, lease: Lease, reason: FailureReason, error_details: str | None) -> bool:
        """Processing -> DLQ. False when the worker no longer owns the job (a stale move)."""
        groups, params = fence_params(lease.worker_id, [lease], self.dialect)
        params["failure_reason"] = int(reason)
        if error_details is not None:
            params["error_details"] = error_details
        if self.move(_fail_statements(groups, error_details is not None), params, op="fail"):
            return True
        return bool(self._already(jobs_dlq, [lease], jobs_dlq.c.FailureReason == int(reason)))

    def retry(self, lease: Lease, delay_seconds: float) -> bool:
        """Processing -> Pending, due after ``delay_seconds``."""

        groups, params = fence_params(lease.worker_id, [lease], self.dialect)
        params["retry_delay"] = float(delay_seconds)

        def work(c: Connection) -> bool:
            rows = c.execute(_retry_statement(groups), params).all()
            self.bump_stats(c, "RetriedTotal", Counter(r[0] for r in rows))
            return bool(rows)

        ok, unheard = self._unheard_move("retry", [lease], lambda: self.write(work, op="retry"))
        return ok or (unheard and bool(self._already(jobs_hot, [lease], back_to_pending=0)))

    def reschedule(self, worker_id: str, leases: Sequence[Lease]) -> list[str]:
        """Processing -> Pending for handlers that stopped on shutdown; the attempt is given back."""
        if not leases:
            return []

        groups, params = fence_params(worker_id, leases, self.dialect)

        def work(c: Connection) -> list[str]:
            rows = c.execute(
                update(jobs_hot)
                .where(_fence(groups, PROCESSING))
                .values(
                    Status=literal_column(str(PENDING)),
                    WorkerId=null(),
                    HeartbeatUtc=null(),
                    AttemptCount=jobs_hot.c.AttemptCount - literal_column("1"),
                    ScheduledAtUtc=utcnow(),
                    LastUpdatedUtc=utcnow(),
                )
                .returning(jobs_hot.c.Id),
                params,
            ).all()
            return [r[0] for r in rows]

        moved, unheard = self._unheard_move("reschedule", leases, lambda: self.write(work, op="reschedule"))
        missing = [lease for lease in leases if lease.job_id not in set(moved)]
        if not (missing and unheard):
            return moved
        return moved + sorted(self._already(jobs_hot, missing, back_to_pending=1))

    def _already(
        self,
        table: Table,
        leases: Sequence[Lease],
        condition: ColumnElement[bool] | None = None,
        *,
        back_to_pending: int | None = None,
    ) -> set[str]:
        """Ids among ``leases`` whose job already is where a worker's move would have put it: a
        replay after a lost reply finds its own earlier success there, not a conflict.

        Archive or DLQ: the row names this worker and attempt (and ``condition``, e.g. the failure
        reason, so a zombie burial of our job is not taken for our own move). JobsHot
        (``back_to_pending``): Pending, no owner, at the lease's attempt less ``back_to_pending``
        (a retry keeps the attempt, a reschedule gives it back). Read only on the rare path where a
        move found fewer rows than it named.
        """
        by_id = {lease.job_id: lease for lease in leases}
        t = table.c
        query = select(t.Id, t.WorkerId, t.AttemptCount).where(t.Id.in_(list(by_id)))
        if back_to_pending is not None:
            query = query.where(status_is(t.Status, PENDING), t.WorkerId.is_(None))
        if condition is not None:
            query = query.where(condition)
        rows = self.read(lambda c: c.execute(query).all(), op="recognise")
        found = set()
        for job_id, worker, attempt in rows:
            lease = by_id[job_id]
            if back_to_pending is not None:
                if attempt == lease.attempt - back_to_pending:
                    found.add(job_id)
            elif worker == lease.worker_id and attempt == lease.attempt:
                found.add(job_id)
        return found

    def owned(self, worker_id: str, since: datetime | None = None) -> list[JobRecord]:
        """Fetched and Processing jobs that carry ``worker_id`` (last updated at or after ``since``).

        A worker reads them after a claim whose reply may have been lost: rows it does not hold
        were claimed by a reply it never got. Rare; the Status partial indexes bound the read.
        """
        hot = jobs_hot.c
        query = select(jobs_hot).where(status_in(hot.Status, FETCHED, PROCESSING), hot.WorkerId == worker_id)
        if since is not None:
            query = query.where(hot.LastUpdatedUtc >= since)
        return self.read(lambda c: [hot_record(r) for r in c.execute(query).all()], op="owned")

    # ------------------------------------------------------------------ planner statistics
    def refresh_statistics(self, *, min_age: float = STATISTICS_MIN_AGE) -> bool:
        """PostgreSQL only: ANALYZE JobsHot when the planner's picture of it is stale. Returns
        whether it did. Busy workers call it about once a second.

        A burst into a new or quiet table leaves the planner believing there are almost no
        Pending rows. It then claims by reading and sorting every Pending row instead of walking
        the fetch index, so each claim costs O(backlog) until autovacuum catches up, which takes
        up to autovacuum_naptime (a minute by default).

        Two triggers. The table holds more than twice the rows the planner last counted (and
        over 1,000): that is a burst, and it is analysed at once. Otherwise more than 10% of it
        (and 1,000 rows) changed since the last ANALYZE: analysed only if that was over
        ``min_age`` seconds ago, so a busy queue is not analysed every second.
        """
        if not self.supports_statistics_refresh:
            return False
        row = self.read(
            lambda c: c.execute(
                text(
                    "SELECT s.n_mod_since_analyze, s.n_live_tup, c.reltuples, "
                    "EXTRACT(EPOCH FROM now() - GREATEST(s.last_analyze, s.last_autoanalyze)) "
                    "FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
                    "WHERE s.schemaname = :schema AND s.relname = :table"
                ),
                {"schema": SCHEMA, "table": jobs_hot.name},
            ).first(),
            op="statistics_check",
        )
        if row is None:
            return False
        changed, live, planned, age = int(row[0]), int(row[1]), max(float(row[2]), 0.0), row[3]
        grown = live > max(1000, 2 * planned)
        drifted = changed > max(1000, 0.1 * live) and (age is None or float(age) > min_age)
        if not (grown or drifted):
            return False
        table = self.engine.dialect.identifier_preparer.format_table(jobs_hot)
        # SKIP_LOCKED: when another worker is already analysing, that one is enough.
        self.write_one(lambda c: c.exec_driver_sql(f"ANALYZE (SKIP_LOCKED) {table}"), op="analyze")
        log.info(
            "refreshed planner statistics of %s (%s: ~%d rows, %.0f at the last count, %d changed since)",
            table,
            "grown" if grown else "changed",
            live,
            planned,
            changed,
        )
        return True

    # ------------------------------------------------------------------ recovery sweep
    def sweep(
        self, *, fetched_timeout: float, zombie_timeout: float, max_attempts: int, batch_size: int | None = None
    ) -> SweepResult:
        """Both recovery phases. Safe to run from any number of processes at once.

        Each phase runs in transactions of at most ``batch_size`` jobs (``Storage.CleanupBatchSize``)
        until nothing is left, so a backlog of zombies never becomes one long transaction. Every
        transaction changes its job rows first and the StatsSummary counters last, as completions
        do: two transactions never wait for each other's rows in opposite orders.
        """
        size = batch_size or self.settings.cleanup_batch_size
        stmts = sweep_statements(fetched_timeout, zombie_timeout, max_attempts, size)

        def recover(c: Connection) -> int:
            return int(c.execute(stmts.recover).rowcount or 0)

        def retry(c: Connection) -> int:
            retried = c.execute(stmts.retry).all()
            self.bump_stats(c, "RetriedTotal", Counter(r[0] for r in retried))
            return len(retried)

        def bury(c: Connection) -> list[str]:
            ids = [r[0] for r in c.execute(stmts.zombie_ids).all()]
            if not ids:
                return []
            move, params = stmts.zombies, {"zombie_ids": ids}
            if self.dialect == "postgresql":
                return [r[0] for r in c.execute(move.single, params)]
            if self.dialect == "mssql":
                return [r[0] for r in c.execute(move.batch, params)]
            moved = self.move_in_db(c, move, params)
            self.bump_stats(c, move.counter, Counter(queue for _, queue in moved))
            return [job_id for job_id, _ in moved]

        def loop(phase: Callable[[Connection], int], op: str) -> int:
            total = 0
            while True:
                n = self.write(phase, op=op)
                total += n
                if n < size:
                    return total

        recovered = loop(recover, "sweep_recover")
        retried = loop(retry, "sweep_retry")
        zombie_ids: list[str] = []
        while True:
            batch = self.write(bury, op="sweep_zombies")
            zombie_ids += batch
            if len(batch) < size:
                break
        return SweepResult(
            recovered=recovered, archived=len(zombie_ids), retried_zombies=retried, zombie_ids=zombie_ids
        )

    # ------------------------------------------------------------------ reads
    def get_job(self, job_id: str) -> JobRecord | None:
        def work(c: Connection) -> JobRecord | None:
            # One statement across the three tables: a job moving between them is never missed.
            return record_from_union(c.execute(get_job_statement(), {"job_id": job_id}).all())

        return self.read(work, op="get_job")

    def list_queues(self) -> list[QueueInfo]:
        def work(c: Connection) -> list[QueueInfo]:
            rows = c.execute(select(queues).order_by(queues.c.Name)).all()
            return [
                QueueInfo(
                    name=r.Name,
                    is_paused=bool(r.IsPaused),
                    is_active=bool(r.IsActive),
                    zombie_timeout_seconds=r.ZombieTimeoutSeconds,
                    max_workers=r.MaxWorkers,
                    last_updated_utc=r.LastUpdatedUtc,
                )
                for r in rows
            ]

        return self.read(work, op="list_queues")

    _UNSET: Any = object()

    def update_queue(
        self,
        name: str,
        *,
        paused: bool | None = None,
        zombie_timeout_seconds: int | Any | None = _UNSET,
        max_workers: int | Any | None = _UNSET,
        conn: Connection | None = None,
    ) -> QueueInfo:
        """Create the queue row if needed and change the given fields (None clears an override)."""
        check_key("queue", name)
        values: dict[str, Any] = {"LastUpdatedUtc": utcnow()}
        if paused is not None:
            values["IsPaused"] = paused
        if zombie_timeout_seconds is not self._UNSET:
            values["ZombieTimeoutSeconds"] = zombie_timeout_seconds
        if max_workers is not self._UNSET:
            values["MaxWorkers"] = max_workers

        def work(c: Connection) -> QueueInfo:
            self._known_queues.discard(name)
            self._limited_cache = (0.0, [])
            self.ensure_queue(c, name)
            c.execute(update(queues).where(queues.c.Name == name).values(**values))
            r = c.execute(select(queues).where(queues.c.Name == name)).one()
            return QueueInfo(
                name=r.Name,
                is_paused=bool(r.IsPaused),
                is_active=bool(r.IsActive),
                zombie_timeout_seconds=r.ZombieTimeoutSeconds,
                max_workers=r.MaxWorkers,
                last_updated_utc=r.LastUpdatedUtc,
            )

        if conn is not None:
            return work(conn)
        return self.write(work, op="update_queue")

    def queue_stats(self) -> list[QueueStats]:
        def work(c: Connection) -> list[QueueStats]:
            now = self.db_now(c)
            counts: dict[str, Counter[int]] = defaultdict(Counter)
            for q, status, n in c.execute(
                select(jobs_hot.c.Queue, jobs_hot.c.Status, func.count()).group_by(jobs_hot.c.Queue, jobs_hot.c.Status)
            ).all():
                counts[q][int(status)] = int(n)
            oldest: dict[str, datetime] = {
                r[0]: r[1]
                for r in c.execute(
                    select(jobs_hot.c.Queue, func.min(jobs_hot.c.ScheduledAtUtc))
                    .where(status_is(jobs_hot.c.Status, PENDING), jobs_hot.c.ScheduledAtUtc <= utcnow())
                    .group_by(jobs_hot.c.Queue)
                ).all()
            }
            dlq: dict[str, int] = {
                r[0]: int(r[1])
                for r in c.execute(select(jobs_dlq.c.Queue, func.count()).group_by(jobs_dlq.c.Queue)).all()
            }
            totals = {r.Queue: r for r in c.execute(select(stats_summary)).all()}
            names = sorted(
                set(counts) | set(dlq) | set(totals) | {r[0] for r in c.execute(select(queues.c.Name)).all()}
            )
            out = []
            for name in names:
                t = totals.get(name)
                first = oldest.get(name)
                out.append(
                    QueueStats(
                        queue=name,
                        pending=counts[name][PENDING],
                        fetched=counts[name][FETCHED],
                        processing=counts[name][PROCESSING],
                        succeeded_total=int(t.SucceededTotal) if t else 0,
                        failed_total=int(t.FailedTotal) if t else 0,
                        retried_total=int(t.RetriedTotal) if t else 0,
                        dlq_size=int(dlq.get(name, 0)),
                        oldest_pending_lag_seconds=max(0.0, (now - first).total_seconds()) if first else None,
                        last_activity_utc=t.LastActivityUtc if t else None,
                    )
                )
            return out

        return self.read(work, op="queue_stats")
