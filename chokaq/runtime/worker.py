"""A worker: claims batches (straight into Processing for idle slots, else into a prefetch buffer),
runs handlers with a concurrency limit, keeps their heartbeats fresh in one statement per tick,
and finalises outcomes in batches.

This module holds the scheduling (fetch and start loops, slots, the buffer), running handlers with
tracing, and the reconcile after lost replies. Its collaborators each own one thing:
outcomes.py (what a run's ending becomes), completer.py (writing outcomes), heartbeat.py (leases),
supervisor.py (helper tasks that must not die unnoticed), outage.py (riding out the database)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import math
import os
import random
import signal
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from chokaq.domain.models import JobRecord
from chokaq.domain.states import FailureReason, JobStatus
from chokaq.runtime import outcomes
from chokaq.runtime.completer import Completer
from chokaq.runtime.handlers import Handler, JobContext
from chokaq.runtime.heartbeat import Heartbeat
from chokaq.runtime.outage import Outage, backoff
from chokaq.runtime.outcomes import CANCEL_SHUTDOWN, CANCEL_TIMEOUT, Outcome
from chokaq.runtime.running import Running
from chokaq.runtime.stats import WorkerStats
from chokaq.runtime.supervisor import HelperDied, Supervisor
from chokaq.storage.engine import is_transient
from chokaq.telemetry import instruments, tracer, tracing_active

if TYPE_CHECKING:  # for the annotation only: app imports this module, never the reverse
    from chokaq.runtime.app import ChokaQ

log = logging.getLogger("chokaq.worker")
T = TypeVar("T")

# While a worker has a backlog, a burst is seen within about a second of PostgreSQL counting it;
# the check is one cheap read. Idle workers check less often.
STATISTICS_CHECK_SECONDS = 1.0
STATISTICS_IDLE_CHECK_SECONDS = 10.0


def default_worker_id() -> str:
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    def __init__(
        self,
        app: ChokaQ,
        *,
        queues: list[str] | None = None,
        concurrency: int | None = None,
        worker_id: str | None = None,
        with_sweep: bool = False,
    ) -> None:
        self.app = app
        self.settings = app.settings
        ex = self.settings.execution
        self.storage = app.storage
        self.queues = queues or None
        self.concurrency = concurrency or ex.concurrency
        self.prefetch = max(ex.prefetch, self.concurrency)
        self.batch = min(ex.fetch_batch_size, self.prefetch)
        self.max_held = self.concurrency + self.prefetch  # started and not yet written back
        self.id = (worker_id or self.settings.worker_name or default_worker_id())[:100]
        self.with_sweep = with_sweep
        self.buffer: deque[JobRecord] = deque()
        self.running: dict[str, Running] = {}  # started and not yet finalised
        self.executing: set[str] = set()  # handler still running
        # Since Python 3.10 these bind to the running loop on first use, not at construction.
        self._wake = asyncio.Event()  # NOTIFY arrived or stopping: fetch now
        self._slot = asyncio.Event()  # a handler finished
        self._buffered = asyncio.Event()  # the prefetch buffer has jobs
        self._room = asyncio.Event()  # the prefetch buffer has room
        self._backlog_seen = asyncio.Event()  # a claim came back full
        self._backlog = False
        self._claiming = 0  # jobs asked for by fetches in flight
        self._starting = 0  # slots held by start batches and claims for idle slots in flight
        self._stopping = False
        self._stopped = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        # Enough threads that a heartbeat or an outcome never queues behind fetches and starts
        # stuck on a hung connection (until its timeout ends it).
        self._db_pool = ThreadPoolExecutor(max_workers=6, thread_name_prefix="chokaq-db")
        # Plain handlers get their own threads so they can never starve heartbeats or DB calls.
        self._job_pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="chokaq-job")
        self._fetch_failures = 0
        self._start_failures = 0
        self._listening = threading.Event()  # LISTEN/NOTIFY is up: idle polls can be rarer
        # Refill the buffer when less than one round of work is left, so a worker does not sit on
        # up to Execution.Prefetch reserved jobs while other workers idle.
        self.lookahead = min(self.prefetch, max(self.batch, self.concurrency))
        self._zombie_retry_types = {h.name for h in app.handlers.values() if h.retry_zombies}
        self.counts = WorkerStats()
        # For until_idle: when the worker last held, took or finished a job (or was woken), and an
        # event set at each such change, so waiting for idleness needs no polling.
        self._last_active = time.monotonic()
        self._activity = asyncio.Event()
        self._ended = asyncio.Event()  # run_async has returned
        self.outage = Outage(self.settings.storage.outage_tolerance, ex.health_file, self.id)
        # Lost replies (see Storage.ambiguity): claims and starts in flight, the gate that holds new
        # ones back while the worker reconciles, and whether a reconcile is due.
        self._moves = 0
        self._quiet = asyncio.Event()
        self._stop_ev = asyncio.Event()
        self._gate = asyncio.Event()
        self._ambiguous = False
        self._reconciling = False
        self._in_start: set[str] = set()
        # Jobs this worker started and whose fate it leaves to the sweep (a handler thread that
        # would not stop, an outcome it could not write): a reconcile must never hand them on.
        # Keyed by id, the attempt they ran at: a later claim of the same job is a new one.
        self._left: dict[str, int] = {}
        self._since: datetime | None = None  # database clock at start: older rows are not ours
        self.heartbeat = Heartbeat(
            ex,
            self.outage,
            write=lambda leases: self._db(self.storage.heartbeat, self.id, leases),
            running=self.running,
            executing=self.executing,
            cancel=self._cancel,
            conflict=self._conflict,
        )
        self.completer = Completer(
            self.storage,
            self.id,
            self.outage,
            self.counts,
            db=self._db,
            recorded=self._done,
            abandoned=lambda finished: self._done(finished, left=True),
            conflict=self._conflict,
            events=app.bus,
        )
        self.failure: str | None = None  # why a helper task's death stopped the worker

    # ------------------------------------------------------------------ plumbing
    async def _db(self, fn: Callable[..., T], *args: Any) -> T:
        assert self._loop is not None
        return await self._loop.run_in_executor(self._db_pool, functools.partial(fn, *args))

    async def _move(self, fn: Callable[..., T], *args: Any) -> T:
        """A claim or a start: ownership changes that a lost reply can hide from us. Waits while a
        reconcile runs, and notes a call that may have committed without our hearing."""
        await self._gate.wait()
        self._moves += 1

        def tracked() -> T:
            try:
                with self.storage.ambiguity() as seen:
                    return fn(*args)
            finally:
                if seen.ambiguous:
                    self._ambiguous = True

        try:
            result = await self._db(tracked)
        finally:
            self._moves -= 1
            if not self._moves:
                self._quiet.set()
        self.outage.succeeded()
        return result

    def _conflict(self, transition: str, n: int = 1) -> None:
        if n:
            self.counts.conflicts += n
            instruments().state_transition_conflicts.add(n, {"transition": transition})
            log.warning("%d stale %s move(s): this worker no longer owns the job(s)", n, transition)

    def _poke(self) -> None:
        """Wake the fetcher (new jobs were announced, or we are stopping)."""
        self._wake.set()

    def _active(self) -> None:
        self._last_active = time.monotonic()
        self._activity.set()

    @property
    def stats(self) -> dict[str, int]:
        """The counters as a plain dict (a snapshot; :attr:`counts` is the typed, live object)."""
        return self.counts.as_dict()

    @property
    def busy(self) -> bool:
        """Holding any job: buffered, being started, running, or with its outcome not yet recorded."""
        return bool(self.running or self.buffer or self._in_start)

    @property
    def stopping(self) -> bool:
        return self._stopping

    def wake(self) -> None:
        """Fetch now instead of at the next poll, and count this as activity for :meth:`until_idle`
        (a caller that knows new work is due). Call it on the worker's event loop."""
        self._active()
        self._poke()

    async def until_idle(self, idle_seconds: float, *, max_seconds: float = math.inf) -> None:
        """Return once the worker has held no job for ``idle_seconds`` (counted from the last job it
        finished, the last claim that brought jobs, or the last :meth:`wake`), after ``max_seconds``
        at the most, or as soon as it stops. It does not stop the worker."""
        deadline = time.monotonic() + max_seconds
        while not self._ended.is_set():
            now = time.monotonic()
            if self.busy:
                self._last_active = now
            remaining = min(deadline, self._last_active + idle_seconds) - now
            if remaining <= 0:
                return
            self._activity.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._activity.wait(), remaining)

    async def run_until_idle(self, idle_seconds: float, *, max_seconds: float = math.inf) -> WorkerStats:
        """Run until idle for ``idle_seconds`` (or for ``max_seconds`` at the most), then stop
        gracefully, as :meth:`stop` does; returns the counters."""
        task = asyncio.create_task(self.run_async(), name="chokaq-worker")
        try:
            await self.until_idle(idle_seconds, max_seconds=max_seconds)
        finally:
            self.stop()
            await task
        return self.counts

    def _slot_freed(self) -> None:
        self._slot.set()

    def stop(self) -> None:
        """Ask the worker to shut down gracefully (safe from any thread or signal handler)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._begin_stop)
        else:
            self._stopping = True

    def _begin_stop(self) -> None:
        if not self._stopping:
            log.info("worker %s stopping: no more fetches", self.id)
        self._stopping = True
        for event in (self._wake, self._slot, self._buffered, self._room, self._backlog_seen, self._stop_ev):
            event.set()

    # ------------------------------------------------------------------ main
    def run(self, *, install_signals: bool = True) -> None:
        asyncio.run(self.run_async(install_signals=install_signals))

    async def run_async(self, *, install_signals: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(sig, self._begin_stop)
        self._gate.set()
        await self._wait_for_database()
        instruments().workers_active.add(1)
        listener = self._start_listener()
        loop = self._loop

        def wake_soon() -> None:
            loop.call_soon_threadsafe(self._poke)

        unsubscribe = self.storage.on_enqueue(wake_soon)
        sweeper_stop = threading.Event()
        sweeper = None
        if self.with_sweep:
            from chokaq.runtime.sweeper import sweep_forever

            sweeper = threading.Thread(
                target=sweep_forever, args=(self.storage, self.settings, sweeper_stop, self.app.bus), daemon=True
            )
            sweeper.start()
        log.info(
            "worker %s started: queues=%s concurrency=%d prefetch=%d",
            self.id,
            self.queues or "all",
            self.concurrency,
            self.prefetch,
        )
        helpers = Supervisor(self._helper_died)
        helpers.start("chokaq-heartbeat", self.heartbeat.run())
        helpers.start("chokaq-finalize", self.completer.run())
        if self.outage.health_file is not None:
            helpers.start("chokaq-health", self._health_loop())
        if self.settings.storage.refresh_statistics and self.storage.supports_statistics_refresh:
            helpers.start("chokaq-statistics", self._statistics_loop())
        try:
            await self._dispatch_loop()
        finally:
            await self._shutdown()
            await helpers.close()
            unsubscribe()
            if listener is not None:
                listener.set()
            sweeper_stop.set()
            instruments().workers_active.add(-1)
            self._db_pool.shutdown(wait=False)
            self._job_pool.shutdown(wait=False)
            self._stopped.set()
            self._ended.set()
            self._activity.set()
            self.outage.clear_health()
            log.info("worker %s stopped: %s", self.id, self.stats)
        if self.failure is not None:
            raise HelperDied(f"worker {self.id} stopped because a helper task ended: {self.failure}")

    def _helper_died(self, reason: str) -> None:
        self.failure = reason
        self._begin_stop()

    async def _wait_for_database(self) -> None:
        """Start-up: wait for the database with capped backoff, one line per try, instead of
        exiting (a container that starts during a failover). Only a transient error is waited
        out: a wrong password or URL fails at once."""
        attempt = 0
        while not self._stopping:
            try:
                self._since = await self._db(self.storage.ping)
                self.outage.succeeded()
                self.outage.write_health()
                return
            except Exception as exc:
                if not is_transient(exc):
                    raise
                delay = backoff(attempt)
                self.outage.failed("start-up", exc, delay)
                attempt += 1
                await self._sleep(delay)

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake for a stop."""
        if self._stopping:
            await asyncio.sleep(0)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop_ev.wait(), seconds)

    async def _probe(self) -> None:
        """Past the outage budget: one ping, then a backoff wait. A success resumes claiming."""
        try:
            await self._db(self.storage.ping)
            self.outage.succeeded()
            self._fetch_failures = 0
        except Exception as exc:
            delay = backoff(self._fetch_failures)
            self._fetch_failures += 1
            self.outage.failed("probe", exc, delay)
            await self._sleep(delay)

    async def _reconcile(self) -> None:
        """After a claim or start whose reply may have been lost: find the rows that carry this
        worker's id but that it does not hold, and settle them, so none is left to become a zombie.
        A Fetched one joins the prefetch buffer (it is ours to start). A Processing one never ran
        here (every job this worker started stays in ``running`` until its outcome is recorded):
        it goes back to Pending with its attempt given back, as if it had never been claimed.

        New claims and starts wait meanwhile, and the ones in flight are let finish first: a row
        their replies are about to hand us must not be taken for an orphan.
        """
        if self._reconciling:
            await self._gate.wait()  # the other fetcher's reconcile covers this one too
            return
        self._reconciling = True
        self._gate.clear()
        attempt = 0
        try:
            while self._moves:
                self._quiet.clear()
                await self._quiet.wait()
            while True:
                self._ambiguous = False
                try:
                    rows = await self._db(self.storage.owned, self.id, self._since)
                    held = set(self.running) | {j.id for j in self.buffer} | self._in_start
                    orphans = [r for r in rows if r.id not in held and self._left.get(r.id) != r.attempt_count]
                    fetched = [r for r in orphans if r.status == JobStatus.FETCHED]
                    processing = [r for r in orphans if r.status == JobStatus.PROCESSING]
                    if fetched and self._stopping:
                        await self._db(self.storage.release, self.id, [r.lease for r in fetched])
                    elif fetched:
                        self.buffer.extend(fetched)
                        self._active()
                        self._buffered.set()
                    if processing:
                        await self._db(self.storage.reschedule, self.id, [r.lease for r in processing])
                    self.outage.succeeded()
                    if orphans:
                        log.warning(
                            "reconciled after a lost reply: %d Fetched job(s) %s, %d never-started Processing "
                            "job(s) back to Pending (attempt given back)",
                            len(fetched),
                            "released" if self._stopping else "adopted",
                            len(processing),
                        )
                    return
                except Exception as exc:
                    if self._stopping and self.outage.over_budget():
                        log.error("stopping without reconciling after a lost reply: the database is still away")
                        return
                    delay = backoff(attempt)
                    attempt += 1
                    self.outage.failed("reconcile", exc, delay)
                    await asyncio.sleep(delay)
        finally:
            self._reconciling = False
            self._gate.set()

    async def _health_loop(self) -> None:
        while True:
            self.outage.write_health()
            await asyncio.sleep(5.0)

    def _start_listener(self) -> threading.Event | None:
        if not self.settings.storage.listen_notify or not self.storage.supports_notify:
            return None
        from chokaq.storage.notify import listen

        stop = threading.Event()
        loop = self._loop
        assert loop is not None

        def on_notify() -> None:
            loop.call_soon_threadsafe(self._poke)

        threading.Thread(
            target=listen, args=(self.storage.url, on_notify, stop, self._listening), daemon=True, name="chokaq-listen"
        ).start()
        return stop

    # ------------------------------------------------------------------ dispatch
    async def _dispatch_loop(self) -> None:
        # Fetching and starting run side by side: a start never waits behind a fetch round trip.
        # While there is a backlog a second fetcher and a second starter keep one more round trip
        # of each in flight; idle, only the first fetcher polls.
        loops = [self._fetch_loop(primary=True), self._fetch_loop(primary=False)]
        loops += [self._start_loop(), self._start_loop()]
        await asyncio.gather(*(asyncio.create_task(loop) for loop in loops))

    def _free_slots(self) -> int:
        """Slots neither running a handler nor held by a start in flight. Handlers free theirs
        when they return, before the finaliser writes their outcome; bounding those too
        (Concurrency + Prefetch in all) keeps a slow database from piling up Processing rows."""
        free = min(self.concurrency - len(self.executing), self.max_held - len(self.running))
        return free - self._starting

    def _idle_slots(self) -> int:
        """Free slots that no buffered job will fill: jobs claimed for them can start at once."""
        return self._free_slots() - len(self.buffer)

    async def _fetch_loop(self, *, primary: bool) -> None:
        storage = self.settings.storage
        while not self._stopping:
            if self._ambiguous:
                # Here, not right after the claim: the jobs it returned are launched or buffered
                # first, so the reconcile counts them as held.
                await self._reconcile()
                continue
            poll = storage.idle_polling_interval if self._listening.is_set() else storage.polling_interval
            if not primary and not self._backlog:
                self._backlog_seen.clear()
                await self._backlog_seen.wait()
                continue
            # Idle slots and nothing buffered for them: claim straight into Processing and start
            # (one write per job fewer). Otherwise fill the prefetch buffer with Fetched jobs.
            idle = self._idle_slots()
            start_now = idle > 0
            if start_now:
                want = min(self.batch, idle)
            elif not primary:
                # The second fetcher only claims for idle slots; the buffer is the first one's.
                self._slot.clear()
                await self._slot.wait()
                continue
            else:
                want = min(self.batch, self.prefetch - len(self.buffer) - self._claiming)
                if len(self.buffer) + self._claiming >= self.lookahead or want <= 0:
                    self._room.clear()
                    await self._room.wait()
                    continue
            if primary:
                self._wake.clear()
            if self.outage.over_budget():
                # Past Storage.OutageTolerance: claim nothing, only probe until the database is back.
                await self._probe()
                continue
            if start_now:
                self._starting += want
            else:
                self._claiming += want
            failed: float | None = None
            try:
                jobs = await self._move(
                    functools.partial(
                        self.storage.fetch,
                        self.id,
                        want,
                        self.queues,
                        start=start_now,
                        zombie_retry_types=self._zombie_retry_types,
                        skip=list(self.running),
                    )
                )
                self.counts.fetches += 1
                self._fetch_failures = 0
            except Exception as exc:
                failed = backoff(self._fetch_failures, base=poll)
                self._fetch_failures += 1
                self.outage.failed("claim", exc, failed)
                jobs = []
            finally:
                if start_now:
                    self._starting -= want
                    # Slots this claim held but did not fill are free again: a starter that saw
                    # them taken may be waiting with jobs in the buffer.
                    self._slot.set()
                else:
                    self._claiming -= want
                self._room.set()  # the other fetcher may have been waiting on this claim's share
            if failed is not None:
                await self._sleep(failed)
                continue
            self._backlog = len(jobs) == want
            if self._backlog:
                self._backlog_seen.set()
            if jobs and start_now:
                self._launch(jobs)
                # Let the handlers begin before counting free slots again: those that finish at
                # once leave their slots idle for the next claim instead of sending it to the buffer.
                await asyncio.sleep(0)
                continue
            if jobs:
                self.buffer.extend(jobs)
                self._active()
                self._buffered.set()
                continue
            if primary:
                # Nothing due: sleep until the poll interval passes or a NOTIFY/stop wakes us.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), poll)

    async def _start_loop(self) -> None:
        while not self._stopping:
            free = self._free_slots()
            if free <= 0:
                self._slot.clear()
                await self._slot.wait()
                continue
            if not self.buffer:
                self._buffered.clear()
                await self._buffered.wait()
                continue
            batch = [self.buffer.popleft() for _ in range(min(free, len(self.buffer)))]
            self._room.set()
            self._starting += len(batch)
            ids = {j.id for j in batch}
            self._in_start |= ids  # held, though neither buffered nor running yet
            try:
                await self._start_batch(batch)
            finally:
                self._in_start -= ids
                self._active()  # started, back in the buffer, or lost: a change either way
                self._starting -= len(batch)
                self._slot.set()  # the other starter may have been waiting on these slots

    async def _start_batch(self, batch: list[JobRecord]) -> None:
        try:
            result = await self._move(self.storage.start, self.id, batch, self._zombie_retry_types)
            self._start_failures = 0
        except Exception as exc:
            # Back to the buffer: a start that committed unheard is found by the next one.
            self.buffer.extendleft(reversed(batch))
            delay = backoff(self._start_failures, base=self.settings.storage.polling_interval)
            self._start_failures += 1
            self.outage.failed("start", exc, delay)
            await self._sleep(delay)
            return
        self._conflict("start", len(result.lost))
        self._launch(result.started)

    def _launch(self, started: list[JobRecord]) -> None:
        """Run the handlers of jobs now Processing."""
        now = datetime.now(UTC).replace(tzinfo=None)
        ins = instruments()
        # Looked up once per batch: asking OpenTelemetry for its provider is not free.
        traced = tracing_active()
        for rec in started:
            if rec.id in self.running:
                # Never a second run of one job here (a reconcile and a replayed start both
                # handing over the same row would be a bug; this keeps it from running twice).
                log.error("job %s is already running in this worker; not starting it again", rec.id)
                continue
            if rec.scheduled_at_utc is not None:
                ins.queue_lag.record(
                    max(0.0, (now - rec.scheduled_at_utc).total_seconds() * 1000),
                    {"queue": rec.queue, "type": rec.type},
                )
            ctx = JobContext(
                job_id=rec.id, attempt=rec.attempt_count, queue=rec.queue, type=rec.type, worker_id=self.id
            )
            run = Running(record=rec, lease=rec.lease, ctx=ctx, traced=traced)
            self.running[rec.id] = run
            self.executing.add(rec.id)
            self.counts.started += 1
            run.task = asyncio.create_task(self._execute(run), name=f"chokaq-job-{rec.id}")
        self._active()

    # ------------------------------------------------------------------ execute
    async def _execute(self, run: Running) -> None:
        rec, ctx = run.record, run.ctx
        handler = self.app.handlers.get(rec.type)
        t0 = time.perf_counter()
        outcome: Outcome
        # Without a configured tracer provider every span is a no-op that still costs a job a
        # noticeable share of its bookkeeping; skip it then.
        with (
            tracer().start_as_current_span(f"chokaq.job {rec.type}") if run.traced else contextlib.nullcontext()
        ) as span:
            if span is not None and span.is_recording():
                span.set_attributes(
                    {
                        "chokaq.job.id": rec.id,
                        "chokaq.queue": rec.queue,
                        "chokaq.job.type": rec.type,
                        "chokaq.attempt": rec.attempt_count,
                        "chokaq.worker": self.id,
                    }
                )
            try:
                if handler is None:
                    raise _Rejected(f"no handler is registered for job type {rec.type!r} on worker {self.id}")
                await self._call(handler, run)
                outcome = outcomes.succeeded(rec, run.lease)
            except _Rejected as exc:
                outcome = outcomes.rejected(rec, run.lease, str(exc))
            except asyncio.CancelledError as exc:
                outcome = self._cancelled_outcome(run, exc)
            except BaseException as exc:
                if ctx.is_cancelled():
                    # Stopped by us (timeout, shutdown, lost ownership), whatever it raised on the way out.
                    outcome = self._cancelled_outcome(run, exc)
                else:
                    # A TimeoutError of the handler's own (an HTTP call, say) is an ordinary failure.
                    outcome = self._failure_outcome(run, handler, exc)
                if span is not None:
                    span.record_exception(exc)
            outcome.duration_ms = int((time.perf_counter() - t0) * 1000)
            if span is not None:
                if outcome.reason == FailureReason.TIMEOUT:
                    span.set_attribute("chokaq.timeout", True)
                span.set_attribute("chokaq.outcome", outcome.kind)
        instruments().processing_duration.record(outcome.duration_ms, {"queue": rec.queue, "type": rec.type})
        self.executing.discard(rec.id)
        self._slot_freed()
        self.completer.put(outcome)

    async def _call(self, handler: Handler, run: Running) -> None:
        payload = handler.parse_payload(run.record.payload)
        args: tuple[Any, ...] = (payload, run.ctx) if handler.wants_ctx else (payload,)
        timeout = handler.timeout or self.settings.execution.default_timeout
        if handler.is_async:
            aw: Any = handler.fn(*args)
        else:
            run.thread = self._job_pool.submit(contextvars.copy_context().run, handler.fn, *args)
            aw = asyncio.wrap_future(run.thread)
        # One timer handle per job: cheaper than asyncio.timeout's context manager, and the same
        # effect. A thread cannot be killed; cooperative handlers see ctx.cancelled and stop.
        assert self._loop is not None
        timer = self._loop.call_later(timeout, self._cancel, run, CANCEL_TIMEOUT)
        try:
            await aw
        finally:
            timer.cancel()

    def _timeout_for(self, job_type: str) -> float:
        handler = self.app.handlers.get(job_type)
        return (handler.timeout if handler is not None else None) or self.settings.execution.default_timeout

    def _cancelled_outcome(self, run: Running, exc: BaseException) -> Outcome:
        outcome = outcomes.cancelled(
            run.record,
            run.lease,
            run.ctx.cancel_reason,
            thread_still_running=run.thread is not None and not run.thread.done(),
            heartbeat_failures=self.heartbeat.failures,
            timeout=self._timeout_for(run.record.type),
        )
        if outcome.kind == "drop" and run.ctx.cancel_reason == CANCEL_SHUTDOWN:
            log.error("job %s did not stop within the shutdown grace; leaving it to zombie rescue", run.record.id)
        return outcome

    def _failure_outcome(self, run: Running, handler: Handler | None, exc: BaseException) -> Outcome:
        rec = run.record
        max_attempts = (handler.max_attempts if handler else None) or self.settings.retry.max_attempts
        outcome = outcomes.failed(rec, run.lease, exc, max_attempts=max_attempts, retry=self.settings.retry)
        instruments().failed.add(1, {"queue": rec.queue, "type": rec.type})
        if outcome.kind == "retry":
            log.info(
                "job %s (%s) attempt %d failed, retry in %.1fs: %s",
                rec.id,
                rec.type,
                rec.attempt_count,
                outcome.delay,
                exc,
            )
        else:
            log.warning(
                "job %s (%s) attempt %d failed -> DLQ %s: %s",
                rec.id,
                rec.type,
                rec.attempt_count,
                outcome.reason.label if outcome.reason is not None else "?",
                exc,
            )
        return outcome

    # ------------------------------------------------------------------ finalize
    def _done(self, finished: list[Outcome], *, left: bool = False) -> None:
        """Outcomes the completer recorded (or, ``left``, abandoned to the sweep): slots free up."""
        for o in finished:
            self.running.pop(o.record.id, None)
            if left or o.kind == "drop":
                self._left[o.record.id] = o.lease.attempt
        self._slot.set()
        self._active()

    # ------------------------------------------------------------------ planner statistics
    async def _statistics_loop(self) -> None:
        """Storage.RefreshStatistics: after a burst into a new or quiet JobsHot, PostgreSQL plans
        every claim as a read and sort of the whole backlog until the table is analysed again;
        autovacuum may take a minute or more. The worker checks at start, then about every second
        while its claims come back full (a backlog: bursts show up so), else every ten seconds."""
        last = -math.inf
        while True:
            if self._backlog or time.monotonic() - last >= STATISTICS_IDLE_CHECK_SECONDS:
                last = time.monotonic()
                try:
                    await self._db(self.storage.refresh_statistics)
                except Exception as exc:  # an optimisation: never let it stop the worker
                    self.outage.failed("statistics check", exc)
            await asyncio.sleep(random.uniform(0.8, 1.2) * STATISTICS_CHECK_SECONDS)

    def _cancel(self, run: Running, reason: str) -> None:
        run.ctx.cancel(reason)
        if run.task is not None and not run.task.done():
            run.task.cancel()

    # ------------------------------------------------------------------ shutdown
    async def _shutdown(self) -> None:
        ex = self.settings.execution
        if self.buffer:
            pending = list(self.buffer)
            self.buffer.clear()
            try:
                released = await self._db(self.storage.release, self.id, [j.lease for j in pending])
                log.info("released %d buffered jobs to Pending", len(released))
                self._conflict("release", len(pending) - len(released))
            except Exception:
                log.exception("release failed; the sweep will return them after Recovery.FetchedJobTimeout")
        tasks = [r.task for r in self.running.values() if r.task is not None and not r.task.done()]
        if tasks:
            log.info("waiting up to %.0fs for %d running handlers", ex.shutdown_grace, len(tasks))
            _, still = await asyncio.wait(tasks, timeout=ex.shutdown_grace)
            if still:
                for r in list(self.running.values()):
                    if r.task in still:
                        self._cancel(r, CANCEL_SHUTDOWN)
                await asyncio.wait(still, timeout=5.0)
        # Let every outcome reach the database before the heartbeat stops; during an outage,
        # for as long as the outage budget allows.
        deadline = time.monotonic() + 30

        def riding_out() -> bool:
            return self.outage.down_since is not None and not self.outage.over_budget()

        while self.running and (time.monotonic() < deadline or riding_out()):
            await asyncio.sleep(0.02)
        if self._ambiguous:
            await self._reconcile()


class _Rejected(Exception):
    pass
