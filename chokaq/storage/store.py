"""The storage facade: enqueue, the worker's fenced moves, the recovery sweep and reads.

What it runs lives beside it: the statements in :mod:`.statements`, the transaction-and-replay
runner in :mod:`.transactions`, queue rows in :mod:`.queues`, wake-ups in :mod:`.wakeups`.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, Table, delete, false, func, insert, literal_column, null, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import ColumnElement
from ulid import ULID

from chokaq.domain.keys import check_key
from chokaq.domain.models import EnqueueRequest, JobRecord, Lease, QueueInfo, QueueStats, SweepResult
from chokaq.domain.states import FailureReason, JobStatus
from chokaq.settings import StorageSettings
from chokaq.storage import statements as st
from chokaq.storage.engine import build_engine
from chokaq.storage.lookup import get_job_statement, record_from_union, stored_ids_statement
from chokaq.storage.queue_stats import read_queue_stats
from chokaq.storage.queues import UNSET, Override, QueueCache, queue_values, read_queues
from chokaq.storage.records import hot_record
from chokaq.storage.schema import SCHEMA, jobs_archive, jobs_dlq, jobs_hot, queues, stats_summary
from chokaq.storage.sqlfuncs import row_lock, seconds, utc_offset, utcnow
from chokaq.storage.statements import FETCHED, PENDING, PROCESSING, MoveStatements, StatsCounter, fence_params
from chokaq.storage.statistics import STATISTICS_MIN_AGE, refresh_statistics
from chokaq.storage.transactions import Ambiguity, Transactions
from chokaq.storage.wakeups import Announcer, Wakeups, notify

log = logging.getLogger("chokaq.storage")
T = TypeVar("T")


def _value_or_null(value: Any) -> Any:
    """``value`` as a parameter, or NULL in the statement text when it is None."""
    return null() if value is None else value


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
        self.tx = Transactions(self.engine, self.settings)
        self.queue_cache = QueueCache()
        self.wakeups = Wakeups()
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
    @property
    def fault_injector(self) -> Callable[[str], None] | None:
        """Test hook: called with the operation name before each transaction attempt."""
        return self.tx.fault_injector

    @fault_injector.setter
    def fault_injector(self, hook: Callable[[str], None] | None) -> None:
        self.tx.fault_injector = hook

    def close(self) -> None:
        self.tx.close()

    def write(self, fn: Callable[[Connection], T], *, op: str = "write") -> T:
        """Run ``fn`` in one write transaction, replaying it whole on transient errors."""
        return self.tx.write(fn, op=op)

    def read(self, fn: Callable[[Connection], T], *, op: str = "read") -> T:
        return self.tx.read(fn, op=op)

    def write_one(self, fn: Callable[[Connection], T], *, op: str) -> T:
        """Run ``fn``, which issues exactly one writing statement, without an explicit transaction
        (see :meth:`Transactions.write_one`)."""
        return self.tx.write_one(fn, op=op)

    def ambiguity(self) -> contextlib.AbstractContextManager[Ambiguity]:
        """Whether a write in the block may have committed behind a lost reply (see
        :meth:`Transactions.ambiguity`)."""
        return self.tx.ambiguity()

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


    def _stored(self, c: Connection, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are stored, in any of the three tables (one statement)."""
        return {r[0] for r in c.execute(stored_ids_statement(), {"stored_ids": list(ids)})}

    # ------------------------------------------------------------------ wake-ups
    def on_enqueue(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` after this process commits new Pending work. Returns an unsubscriber."""
        return self.wakeups.on_enqueue(callback)

    def add_announcer(self, announcer: Announcer) -> Callable[[], None]:
        """Call ``announcer`` after this process commits new Pending work (see
        :meth:`Wakeups.add_announcer`). Returns an unsubscriber."""
        return self.wakeups.add_announcer(announcer)

    def announce(self, due: Mapping[str, float] | None = None) -> None:
        """After a commit that stored new Pending work: wake this process's workers and announcers."""
        self.wakeups.announce(due)

    @staticmethod
    def notify(conn: Connection, queue: str) -> None:
        """Inside a transaction that stores new Pending work on ``queue``: wake other processes'
        workers when it commits (PostgreSQL NOTIFY; nothing elsewhere)."""
        notify(conn, queue)

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
        return self.tx.retrying(lambda: upgrade(self.engine), op="upgrade")

    # ------------------------------------------------------------------ helpers
    def bind(self, conn: Connection) -> Connection:
        """Prepare a caller's connection for our tables (SQLite has no schemas)."""
        if conn.dialect.name == "sqlite":
            conn.execution_options(schema_translate_map={SCHEMA: None})
        return conn

    def ensure_queue(self, conn: Connection, name: str) -> None:
        """Create the queue row unless this process has seen it (see :class:`QueueCache`)."""
        self.queue_cache.ensure(conn, name)

    def bump_stats(self, conn: Connection, column: StatsCounter, per_queue: Counter[str], sign: int = 1) -> None:
        """Add to one StatsSummary counter per queue, creating the row when it is missing."""
        bump = st.bump_statement(column)
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

    # ------------------------------------------------------------------ enqueue
    def enqueue(
        self, req: EnqueueRequest, *, conn: Connection | None = None, job_id: str | None = None
    ) -> tuple[str, bool]:
        """Store a job. Returns ``(id, created)``; a live duplicate idempotency key returns the
        existing id with ``created=False``. With ``conn`` the job joins the caller's transaction.
        ``job_id``: the id to store it under (made up here when not given)."""
        job_id = job_id or new_job_id()

        def work(c: Connection) -> tuple[str, bool]:
            if conn is None and self.tx.replaying() and self._stored(c, [job_id]):
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
            self.notify(c, req.queue)
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
                if self.tx.replaying() and self._stored(c, out):
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
                    self.notify(c, q)
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
        if limit <= 0:
            return []
        params: dict[str, Any] = {"claim_worker": worker_id, "claim_skip": list(claim.skip)}
        if queue_names:
            params["claim_queues"] = list(queue_names)
        zombie_retry = claim.start and bool(claim.zombie_retry_types)
        if zombie_retry:
            params["zombie_types"] = list(claim.zombie_retry_types)
        stmt: Any
        if conn.dialect.name == "mssql":
            params.pop("claim_queues", None)
            for i, name in enumerate(queue_names or ()):
                params[f"claim_queue_{i}"] = name
            stmt = st.mssql_claim_statement(len(queue_names or ()), limited, limit, claim.start, zombie_retry)
        else:
            stmt = st.claim_statement(bool(queue_names), limited, limit, claim.start, zombie_retry)
        return [hot_record(r) for r in conn.execute(stmt, params).all()]

    def _limited_queues(self) -> list[str]:
        """Queues with MaxWorkers, from the cache (see :meth:`QueueCache.limited`)."""
        return self.queue_cache.limited(lambda work: self.tx.run(work, op="limited_queues", readonly=True, single=True))

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
        claimed = self.write_one(
            lambda c: self._claim(c, worker_id, limit, queue_names, limited=False, claim=opts), op="fetch"
        )
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
                    .where(jobs_hot.c.Queue == name, st.status_in(jobs_hot.c.Status, FETCHED, PROCESSING))
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
        stmt = st.start_statement(groups, bool(zombie_retry_types))

        def work(c: Connection) -> list[Any]:
            return list(c.execute(stmt, params))

        by_id = {j.id: j for j in jobs}
        # The new state of each started job, written to the caller's records only once the whole
        # call has succeeded: a follow-up read or release that fails sends the batch back to the
        # worker's buffer, and records already saying Processing at the next attempt would then
        # fence the retried start out (the job stranded Processing, never run).
        fresh: dict[str, tuple[int, Any, Any, Any, bool]] = {}
        for job_id, attempt, started_at, heartbeat, updated, zombie_retry in self.write_one(work, op="start"):
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
            hot.Id.in_(list(by_id)), st.status_is(hot.Status, PROCESSING), hot.WorkerId == worker_id
        )
        rows = self.read(lambda c: [hot_record(r) for r in c.execute(query).all()], op="recognise")
        return [r for r in rows if r.attempt_count == by_id[r.id].attempt + 1]

    def _release(self, c: Connection, worker_id: str, leases: Sequence[Lease]) -> list[str]:
        groups, params = fence_params(worker_id, leases, c.dialect.name)
        return [r[0] for r in c.execute(st.release_statement(groups), params)]

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
        stmt = st.heartbeat_statement(groups)

        def work(c: Connection) -> set[str]:
            return {r[0] for r in c.execute(stmt, params)}

        return self.write_one(work, op="heartbeat")

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
            return self.write_one(lambda c: [(r[0], r[1]) for r in c.execute(move.single, params)], op=op)
        if self.dialect == "mssql":
            return self.write_one(lambda c: [(r[0], r[1]) for r in c.execute(move.batch, params)], op=op)

        def work(c: Connection) -> list[tuple[str, str]]:
            moved = self.move_in_db(c, move, params)
            self.bump_stats(c, move.counter, Counter(queue for _, queue in moved))
            return moved

        return self.write(work, op=op)

    def complete(self, worker_id: str, done: Sequence[Completion]) -> set[str]:
        """Processing -> Archive for a batch of successes, in one transaction."""
        if not done:
            return set()
        groups, params = fence_params(worker_id, [d.lease for d in done], self.dialect)
        params["durations"] = json.dumps({d.lease.job_id: d.duration_ms for d in done})
        moved = {job_id for job_id, _ in self.move(st.complete_statements(groups), params, op="complete")}
        missing = [d.lease for d in done if d.lease.job_id not in moved]
        return moved | self._already(jobs_archive, missing) if missing else moved

    def fail(self, lease: Lease, reason: FailureReason, error_details: str | None) -> bool:
        """Processing -> DLQ. False when the worker no longer owns the job (a stale move)."""
        groups, params = fence_params(lease.worker_id, [lease], self.dialect)
        params["failure_reason"] = int(reason)
        if error_details is not None:
            params["error_details"] = error_details
        if self.move(st.fail_statements(groups, error_details is not None), params, op="fail"):
            return True
        return bool(self._already(jobs_dlq, [lease], jobs_dlq.c.FailureReason == int(reason)))

    def retry(self, lease: Lease, delay_seconds: float) -> bool:
        """Processing -> Pending, due after ``delay_seconds``."""

        groups, params = fence_params(lease.worker_id, [lease], self.dialect)
        params["retry_delay"] = float(delay_seconds)

        def work(c: Connection) -> bool:
            rows = c.execute(st.retry_statement(groups), params).all()
            self.bump_stats(c, st.RETRIED, Counter(r[0] for r in rows))
            return bool(rows)

        ok, unheard = self._unheard_move("retry", [lease], lambda: self.write(work, op="retry"))
        return ok or (unheard and bool(self._already(jobs_hot, [lease], back_to_pending=0)))

    def reschedule(self, worker_id: str, leases: Sequence[Lease]) -> list[str]:
        """Processing -> Pending for handlers that stopped on shutdown; the attempt is given back."""
        if not leases:
            return []

        groups, params = fence_params(worker_id, leases, self.dialect)

        def work(c: Connection) -> list[str]:
            rows = c.execute(st.reschedule_statement(groups), params).all()
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
            query = query.where(st.status_is(t.Status, PENDING), t.WorkerId.is_(None))
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
        query = select(jobs_hot).where(st.status_in(hot.Status, FETCHED, PROCESSING), hot.WorkerId == worker_id)
        if since is not None:
            query = query.where(hot.LastUpdatedUtc >= since)
        return self.read(lambda c: [hot_record(r) for r in c.execute(query).all()], op="owned")

    # ------------------------------------------------------------------ planner statistics
    def refresh_statistics(self, *, min_age: float = STATISTICS_MIN_AGE) -> bool:
        """PostgreSQL only: ANALYZE JobsHot when the planner's picture of it is stale. Returns
        whether it did (see :func:`chokaq.storage.statistics.refresh_statistics`)."""
        if not self.supports_statistics_refresh:
            return False
        return refresh_statistics(self.tx, min_age=min_age)

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
        stmts = st.sweep_statements(fetched_timeout, zombie_timeout, max_attempts, size)

        def recover(c: Connection) -> int:
            return int(c.execute(stmts.recover).rowcount or 0)

        def retry(c: Connection) -> int:
            retried = c.execute(stmts.retry).all()
            self.bump_stats(c, st.RETRIED, Counter(r[0] for r in retried))
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
        return self.read(read_queues, op="list_queues")

    def update_queue(
        self,
        name: str,
        *,
        paused: bool | None = None,
        zombie_timeout_seconds: Override = UNSET,
        max_workers: Override = UNSET,
        conn: Connection | None = None,
    ) -> QueueInfo:
        """Create the queue row if needed and change the given fields (None clears an override)."""
        check_key("queue", name)
        values = queue_values(paused, zombie_timeout_seconds, max_workers)

        def work(c: Connection) -> QueueInfo:
            return self.queue_cache.change(c, name, values)

        if conn is not None:
            return work(conn)
        return self.write(work, op="update_queue")

    def queue_stats(self) -> list[QueueStats]:
        return self.read(lambda c: read_queue_stats(c, self.db_now(c)), op="queue_stats")
