"""The storage facade: the one object the runtime, the API, the CLI and the Functions hold.

It keeps the worker path (enqueue, fetch, start, heartbeat, complete, fail, retry, reschedule,
owned), the recovery sweep, planner statistics and reads, and delegates to the rooms beside it:
:mod:`.statements` (the SQL, built and cached), :mod:`.transactions` (the transaction-and-replay
runner), :mod:`.enqueue` (:mod:`.loop_enqueue` on a producer's event loop), :mod:`.claims`, :mod:`.moving`,
:mod:`.lost_replies` (a replay recognising its own success), :mod:`.queues` and :mod:`.wakeups`.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, select

from chokaq.domain.keys import check_key
from chokaq.domain.models import Enqueued, EnqueueRequest, JobRecord, Lease, QueueInfo, QueueStats, SweepResult
from chokaq.domain.states import FailureReason, JobStatus
from chokaq.settings import StorageSettings
from chokaq.storage import moving, recovery
from chokaq.storage import statements as st
from chokaq.storage.claims import Claimer, ClaimOptions
from chokaq.storage.dead_letters import DeadLetter, fail_many
from chokaq.storage.dialects import profile_of
from chokaq.storage.dialects.postgres_statistics import STATISTICS_MIN_AGE, StatisticsCheck
from chokaq.storage.engine import build_engine
from chokaq.storage.enqueue import Enqueuer, new_job_id
from chokaq.storage.enqueue_batch import BatchEnqueuer
from chokaq.storage.event_feed import new_origin
from chokaq.storage.job_notes import Notes, bind_many
from chokaq.storage.lookup import get_job_statement, record_from_union
from chokaq.storage.loop_enqueue import LoopEnqueuer
from chokaq.storage.loop_transport import ConnectArgs, LoopTransport, loop_supported
from chokaq.storage.lost_replies import LostReplies
from chokaq.storage.moving import bump_stats
from chokaq.storage.queue_figures import read_queue_stats
from chokaq.storage.queues import UNSET, Override, QueueCache, queue_values, read_queues
from chokaq.storage.records import hot_record
from chokaq.storage.schema import hot_record_columns, jobs_archive, jobs_hot
from chokaq.storage.sqlfuncs import utcnow
from chokaq.storage.statements import FETCHED, PROCESSING, MoveStatements, fence_params
from chokaq.storage.transactions import Ambiguity, Transactions
from chokaq.storage.wakeups import Announcer, Wakeups
from chokaq.storage.worker_store import WorkerStore
from chokaq.storage.worker_types import Completion, StartResult

log = logging.getLogger("chokaq.storage")
T = TypeVar("T")
__all__ = ["Completion", "DeadLetter", "StartResult", "Storage", "new_job_id"]


# What a start stamps on a job: (attempt, started at, heartbeat, last updated, ZombieRetry).
_Started = tuple[int, datetime | None, datetime | None, datetime | None, bool]


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
        self.profile = profile_of(self.engine.dialect)
        self.tx = Transactions(self.engine, self.settings)
        # Names this storage's event feed rows, so this process's followers skip them (event_feed.py).
        self.origin = new_origin(self.engine)
        self.queue_cache = QueueCache()
        self.wakeups = Wakeups()
        self.lost_replies = LostReplies(self.tx)
        self._statistics = StatisticsCheck(self.tx)
        self._enqueuer = Enqueuer(self.tx, self.queue_cache, self.wakeups)
        self._batches = BatchEnqueuer(self.tx, self.queue_cache, self.wakeups)
        self._claimer = Claimer(self.tx, self.queue_cache, prepare=lambda: self._statistics.keeps_plans_current)
        # What the engine connects with, for LoopTransports (PostgreSQL): a worker's, a producer's (on_loop).
        self._connect_args = ConnectArgs(self.engine, own=engine is None) if self.profile.loop_transport else None
        self._loop_refusals: set[str] = set()  # reasons already logged
        self.on_loop = LoopEnqueuer(self.tx, self.queue_cache, self.wakeups, self._loop_args, self.settings.pool_size)

    # What this database offers the worker, asked by name rather than by dialect outside storage/.
    @property
    def supports_notify(self) -> bool:
        """LISTEN/NOTIFY wake-ups (see dialects/postgres_listen.py): PostgreSQL."""
        return self.profile.listen_notify

    @property
    def supports_statistics_refresh(self) -> bool:
        """Whether :meth:`refresh_statistics` can ever do anything here: PostgreSQL."""
        return self.profile.statistics

    def for_worker(self, worker_id: str) -> WorkerStore:
        """The database calls of one worker, with the threads and loop connections it runs them on."""
        return WorkerStore(self, worker_id)

    def loop_transport(self) -> LoopTransport | None:
        """A transport for the calling event loop's claims and completions (closed by the caller
        before its loop ends), or None: see :meth:`_loop_args`. Never blocks."""
        args = self._loop_args()
        return LoopTransport(self.tx, args) if args is not None else None

    def _loop_args(self) -> tuple[Sequence[Any], Mapping[str, Any]] | None:
        """What a loop transport connects with (as the engine did, once it has connected); None
        before that, on other databases, and where it cannot connect so (logged once)."""
        if self._connect_args is None:
            return None
        why = self._connect_args.refusal() or (None if loop_supported() else "the event loop is a ProactorEventLoop")
        if why is not None:
            if why not in self._loop_refusals:
                self._loop_refusals.add(why)
                log.info("calls run on database threads, not on the calling event loop: %s", why)
            return None
        return self._connect_args.seen

    # ------------------------------------------------------------------ transactions
    @property
    def fault_injector(self) -> Callable[[str], None] | None:
        """Test hook: called with the operation name before each transaction attempt."""
        return self.tx.fault_injector

    @fault_injector.setter
    def fault_injector(self, hook: Callable[[str], None] | None) -> None:
        self.tx.fault_injector = hook

    def close(self) -> None:
        self.on_loop.close()
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

    # ------------------------------------------------------------------ enqueue
    def enqueue(
        self, req: EnqueueRequest, *, conn: Connection | None = None, job_id: str | None = None
    ) -> tuple[str, bool]:
        """Store a job. Returns ``(id, created)``; a live duplicate idempotency key returns the
        existing id with ``created=False``. With ``conn`` the job joins the caller's transaction.
        ``job_id``: the id to store it under (made up here when not given)."""
        return self._enqueuer.enqueue(req, conn=conn, job_id=job_id)

    def enqueue_many(self, reqs: Sequence[EnqueueRequest]) -> list[str]:
        """Bulk insert, in transactions of at most ``Storage.CleanupBatchSize`` jobs each, so a
        large batch never holds its locks and log space in one transaction. Jobs with
        idempotency keys go one by one. Should a batch fail for good, the batches before it stay
        enqueued and the error is raised.
        """
        return self._enqueuer.enqueue_many(reqs)

    def enqueue_all(self, reqs: Sequence[EnqueueRequest], *, conn: Connection | None = None) -> list[Enqueued]:
        """Store every job or none, in one transaction (the caller's with ``conn``): a result per
        job, in order (see enqueue_batch.py, idempotency keys included)."""
        return self._batches.enqueue_all(reqs, conn=conn)

    # ------------------------------------------------------------------ fetch and start
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
        options = ClaimOptions(start, tuple(zombie_retry_types), tuple(skip))
        return self._claimer.fetch(worker_id, limit, queue_names, options)

    def fetches_on_loop(self, queue_names: Sequence[str] | None = None) -> bool:
        """Whether :meth:`fetch_on_loop` can claim for ``queue_names`` now (else :meth:`fetch`,
        on a database thread: queues with MaxWorkers, or their list is due for a re-read)."""
        return self._claimer.on_loop_possible(queue_names)

    async def fetch_on_loop(
        self,
        transport: LoopTransport,
        worker_id: str,
        limit: int,
        queue_names: Sequence[str] | None = None,
        *,
        seen: Ambiguity,
        start: bool = False,
        zombie_retry_types: Collection[str] = (),
        skip: Collection[str] = (),
    ) -> list[JobRecord]:
        """:meth:`fetch` on the event loop of ``transport``, where :meth:`fetches_on_loop` says it can.
        ``seen.ambiguous``: the claim may have committed behind a lost reply."""
        options = ClaimOptions(start, tuple(zombie_retry_types), tuple(skip))
        return await self._claimer.fetch_on_loop(transport, worker_id, limit, queue_names, options, seen)

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
        by_id = {j.id: j for j in jobs}
        # The new state of each started job, written to the caller's records only once the whole
        # call has succeeded: a follow-up read or release that fails sends the batch back to the
        # worker's buffer, and records already saying Processing at the next attempt would then
        # fence the retried start out (the job stranded Processing, never run).
        fresh: dict[str, _Started] = {}
        stamped = self.tx.run_statement(stmt, params, op="start")
        for job_id, attempt, started_at, heartbeat, updated, zombie_retry in stamped:
            fresh[job_id] = (attempt, started_at, heartbeat, updated, bool(zombie_retry))
        rest = [lease for lease in leases if lease.job_id not in fresh]
        if rest:
            # A replay after a lost reply finds its own start done: Processing under this worker at
            # the next attempt. Nobody ran them; they start now, attempt counted once.
            for row in self._restarted(worker_id, rest):
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

    def _restarted(self, worker_id: str, leases: Sequence[Lease]) -> list[JobRecord]:
        """Jobs among ``leases`` that a start whose reply was lost already started, with their lease
        refreshed. That start may be seconds old (the replays failed while the database was away):
        its heartbeat is, too, and the handlers begin only now, so the lease is renewed before
        they do, as a start would. A job the sweep took meanwhile is not ours to start."""
        rows = self.lost_replies.started_by(worker_id, leases)
        if not rows:
            return []
        alive = self.heartbeat(worker_id, [r.lease for r in rows])
        return [r for r in rows if r.id in alive]

    def release(self, worker_id: str, leases: Sequence[Lease]) -> list[str]:
        """Fetched -> Pending for jobs this worker reserved but will not start (shutdown)."""
        if not leases:
            return []
        groups, params = fence_params(worker_id, leases, self.dialect)
        stmt = st.release_statement(groups)
        return self.write_one(lambda c: [r[0] for r in c.execute(stmt, params)], op="release")

    # ------------------------------------------------------------------ while running
    def heartbeat(self, worker_id: str, leases: Sequence[Lease], notes: Mapping[str, Notes] | None = None) -> set[str]:
        """One statement for all of a worker's running jobs, with the new ``notes`` (logs, progress)
        of those that have any. Returns the ids still owned."""
        if not leases:
            return set()
        groups, params = fence_params(worker_id, leases, self.dialect)
        stmt = st.heartbeat_statement(groups, *bind_many(params, notes.items() if notes else ()))
        return {r[0] for r in self.tx.run_statement(stmt, params, op="heartbeat")}

    # ------------------------------------------------------------------ finishing moves
    def move(self, move: MoveStatements, params: dict[str, Any], *, op: str) -> list[tuple[str, str]]:
        """Run a move and bump its counter atomically. Returns ``(Id, Queue)`` of each moved row."""
        # Straight through the driver (see executor.py): one statement or batch, or else the copy,
        # delete and counters in one transaction.
        if self.profile.moves_alone:
            return [(r[0], r[1]) for r in self.tx.run_statement(self.profile.alone_move(move), params, op=op)]
        return self.tx.retrying(lambda: moving.run_move_on_driver(self.tx.executor, move, params), op=op)

    def complete(self, worker_id: str, done: Sequence[Completion]) -> set[str]:
        """Processing -> Archive for a batch of successes, in one transaction."""
        if not done:
            return set()
        move, params = self._completion(worker_id, done)
        moved = {job_id for job_id, _ in self.move(move, params, op="complete")}
        missing = [d.lease for d in done if d.lease.job_id not in moved]
        return moved | self.archived_already(missing) if missing else moved

    async def complete_on_loop(
        self, transport: LoopTransport, worker_id: str, done: Sequence[Completion]
    ) -> tuple[set[str], list[Lease]]:
        """:meth:`complete` on the event loop of ``transport`` (PostgreSQL's one statement): the ids
        moved, and the leases it did not move. A replay after a lost reply finds its own earlier
        success gone from JobsHot: the caller asks :meth:`archived_already` about those (rare,
        and a read, so on a database thread)."""
        if not done:
            return set(), []
        move, params = self._completion(worker_id, done)
        rows = await transport.run(move.single, params, op="complete", seen=Ambiguity(), finish=True)
        moved = {r[0] for r in rows}
        return moved, [d.lease for d in done if d.lease.job_id not in moved]

    def _completion(self, worker_id: str, done: Sequence[Completion]) -> tuple[MoveStatements, dict[str, Any]]:
        durations = {d.lease.job_id: d.duration_ms for d in done}
        groups, params = fence_params(worker_id, [d.lease for d in done], self.dialect, durations)
        notes = bind_many(params, ((d.lease.job_id, d.notes) for d in done if d.notes is not None))
        return st.complete_statements(groups, *notes), params

    def archived_already(self, leases: Sequence[Lease]) -> set[str]:
        """Ids among ``leases`` already archived by this worker at that attempt (see
        :meth:`LostReplies.already`)."""
        return self.lost_replies.already(jobs_archive, leases) if leases else set()

    def fail(
        self,
        lease: Lease,
        reason: FailureReason,
        error_details: str | None,
        attempts: str | None = None,
        notes: Notes | None = None,
    ) -> bool:
        """Processing -> DLQ. False when the worker no longer owns the job (a stale move). ``attempts``:
        the job's history with this attempt added (None: kept); ``notes``: its new logs and progress."""
        return bool(self.fail_many([DeadLetter(lease, reason, error_details, attempts, notes)]))

    def fail_many(self, fails: Sequence[DeadLetter]) -> set[str]:
        """A worker's failures to the DLQ in one transaction, with one event feed row per reason
        (see :func:`dead_letters.fail_many`). Returns the ids moved."""
        return fail_many(self, fails)

    def retry(
        self, lease: Lease, delay_seconds: float, attempts: str | None = None, notes: Notes | None = None
    ) -> bool:
        """Processing -> Pending, due after ``delay_seconds``. ``attempts``: the job's attempt
        history with this attempt added (None: kept as it is); ``notes``: its new logs and progress."""
        groups, params = fence_params(lease.worker_id, [lease], self.dialect)
        params["retry_delay"] = float(delay_seconds)
        if attempts is not None:
            params["attempts"] = attempts
        stmt = st.retry_statement(groups, attempts is not None, *(notes or Notes()).bind(params))

        def work(c: Connection) -> bool:
            rows = c.execute(stmt, params).all()
            bump_stats(c, st.RETRIED, Counter(r[0] for r in rows))
            return bool(rows)

        ok, unheard = self.lost_replies.unheard_move("retry", [lease], lambda: self.write(work, op="retry"))
        return ok or (unheard and bool(self.lost_replies.already(jobs_hot, [lease], back_to_pending=0)))

    def reschedule(self, worker_id: str, leases: Sequence[Lease]) -> list[str]:
        """Processing -> Pending for handlers that stopped on shutdown; the attempt is given back."""
        if not leases:
            return []

        groups, params = fence_params(worker_id, leases, self.dialect)

        def work(c: Connection) -> list[str]:
            rows = c.execute(st.reschedule_statement(groups), params).all()
            return [r[0] for r in rows]

        moved, unheard = self.lost_replies.unheard_move("reschedule", leases, lambda: self.write(work, op="reschedule"))
        missing = [lease for lease in leases if lease.job_id not in set(moved)]
        if not (missing and unheard):
            return moved
        return moved + sorted(self.lost_replies.already(jobs_hot, missing, back_to_pending=1))

    def owned(self, worker_id: str, since: datetime | None = None) -> list[JobRecord]:
        """Fetched and Processing jobs that carry ``worker_id`` (last updated at or after ``since``).

        A worker reads them after a claim whose reply may have been lost: rows it does not hold
        were claimed by a reply it never got. Rare; the Status partial indexes bound the read.
        """
        hot = jobs_hot.c
        mine = (st.status_in(hot.Status, FETCHED, PROCESSING), hot.WorkerId == worker_id)
        query = select(*hot_record_columns).where(*mine)
        if since is not None:
            query = query.where(hot.LastUpdatedUtc >= since)
        return self.read(lambda c: [hot_record(r) for r in c.execute(query).all()], op="owned")

    # ------------------------------------------------------------------ planner statistics
    def refresh_statistics(self, *, min_age: float = STATISTICS_MIN_AGE) -> bool:
        """PostgreSQL only: ANALYZE JobsHot when the planner's picture of it is stale. Returns
        whether it did (see :func:`chokaq.storage.dialects.postgres_statistics.refresh_statistics`)."""
        if not self.supports_statistics_refresh:
            return False
        return self._statistics.refresh(min_age=min_age)

    # ------------------------------------------------------------------ recovery sweep
    def sweep(
        self, *, fetched_timeout: float, zombie_timeout: float, max_attempts: int, batch_size: int | None = None
    ) -> SweepResult:
        """Both recovery phases (see :func:`recovery.sweep`). Safe to run from any number of
        processes at once."""
        size = batch_size or self.settings.cleanup_batch_size
        return recovery.sweep(self.tx, fetched_timeout, zombie_timeout, max_attempts, size)

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
        info = self.write(work, op="update_queue")
        self.queue_cache.confirm([name])
        return info

    def queue_stats(self) -> list[QueueStats]:
        return self.read(lambda c: read_queue_stats(c, self.db_now(c)), op="queue_stats")
