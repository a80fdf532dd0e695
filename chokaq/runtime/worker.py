"""A worker: claims batches (straight into Processing for idle slots, else into a prefetch buffer),
runs handlers with a concurrency limit, keeps their heartbeats fresh in one statement per tick,
and finalises outcomes in batches.

This module holds the scheduling (fetch and start loops), running handlers with tracing, and the
composition of the collaborators, each of which owns one thing: slots.py (what the worker holds and
may claim or start), changes.py (waiting on that), reconcile.py (what lost replies left behind),
outcomes.py (what a run's ending becomes), completer.py (writing outcomes), heartbeat.py (leases),
supervisor.py (helper tasks that must not die unnoticed), outage.py (riding out the database),
statistics.py (planner statistics on PostgreSQL) and health.py (the health file)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import math
import os
import signal
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from chokaq.domain.models import JobRecord
from chokaq.domain.states import FailureReason
from chokaq.runtime import changes, outcomes
from chokaq.runtime.changes import Changes
from chokaq.runtime.completer import Completer
from chokaq.runtime.deadlines import Deadlines
from chokaq.runtime.handlers import CANCEL_SHUTDOWN, CANCEL_TIMEOUT, CancelReason, Handler, JobContext
from chokaq.runtime.health import write_health_forever
from chokaq.runtime.heartbeat import Heartbeat
from chokaq.runtime.loops import loop_factory
from chokaq.runtime.outage import Outage, backoff
from chokaq.runtime.outcomes import Outcome
from chokaq.runtime.reconcile import Reconciler
from chokaq.runtime.running import Running
from chokaq.runtime.slots import Slots
from chokaq.runtime.statistics import refresh_statistics_forever
from chokaq.runtime.stats import Transition, WorkerStats
from chokaq.runtime.supervisor import HelperDied, Supervisor
from chokaq.storage.engine import is_transient
from chokaq.telemetry import instruments, tracer, tracing_active

if TYPE_CHECKING:  # for the annotation only: app imports this module, never the reverse
    from opentelemetry.trace import Span

    from chokaq.runtime.app import ChokaQ
    from chokaq.storage.loop_driver import LoopDriver

log = logging.getLogger("chokaq.worker")
P = ParamSpec("P")
T = TypeVar("T")


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
        self.id = (worker_id or self.settings.worker_name or default_worker_id())[:100]
        self.with_sweep = with_sweep
        self.counts = WorkerStats()
        self.outage = Outage(self.settings.storage.outage_tolerance, ex.health_file, self.id)
        self.slots = Slots(
            concurrency=self.concurrency,
            prefetch=self.prefetch,
            batch=min(ex.fetch_batch_size, self.prefetch),
        )
        self.reconciler = Reconciler(self.storage, self.id, self.outage, self.slots, db=self._db, adopted=self._active)
        self._woken = False  # NOTIFY arrived or wake() was called: the primary fetcher claims now
        self._wakes = Changes()  # _woken was set, or the worker is stopping
        self._loop: asyncio.AbstractEventLoop | None = None
        # Enough threads that a heartbeat or an outcome never queues behind fetches and starts
        # stuck on a hung connection (until its timeout ends it).
        self._db_pool = ThreadPoolExecutor(max_workers=6, thread_name_prefix="chokaq-db")
        # Plain handlers get their own threads so they can never starve heartbeats or DB calls.
        self._job_pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="chokaq-job")
        self._fetch_failures = 0
        self._start_failures = 0
        self._listening = threading.Event()  # LISTEN/NOTIFY is up: idle polls can be rarer
        self._zombie_retry_types = {h.name for h in app.handlers.values() if h.retry_zombies}
        # For until_idle: when the worker last held, took or finished a job (or was woken), and
        # the changes to that, so waiting for idleness needs no polling.
        self._last_active = time.monotonic()
        self._activity = Changes()
        self._ended = False  # run_async has returned
        # PostgreSQL: claims and completions on this loop (storage/loop_driver.py), made once the
        # database answered at start-up and closed as the worker stops; None elsewhere.
        self._loop_driver: LoopDriver | None = None
        self.heartbeat = Heartbeat(
            ex,
            self.outage,
            write=lambda leases: self._db(self.storage.heartbeat, self.id, leases),
            running=self.slots.running,
            executing=self.slots.executing,
            cancel=self._cancel,
            conflict=self._conflict,
            unsure=lambda: self.slots.unsure_leases(self.id),
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
            driver=self._driver,
        )
        self.deadlines = Deadlines(lambda run: self._cancel(run, CANCEL_TIMEOUT))
        self._metric_attributes: dict[tuple[str, str], dict[str, str]] = {}
        self.failure: str | None = None  # why a helper task's death stopped the worker

    # ------------------------------------------------------------------ plumbing
    async def _db(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        assert self._loop is not None
        return await self._loop.run_in_executor(self._db_pool, functools.partial(fn, *args, **kwargs))

    def _driver(self) -> LoopDriver | None:
        return self._loop_driver

    @contextlib.asynccontextmanager
    async def _driven(self) -> AsyncIterator[None]:
        """The loop driver for this run, on databases that have one. Made after the start-up
        ping, which has connected the engine (the driver connects as it did); closed once the
        outcomes are written."""
        self._loop_driver = self.storage.loop_driver()
        try:
            yield
        finally:
            driver, self._loop_driver = self._loop_driver, None
            if driver is not None:
                await driver.close()

    def _conflict(self, transition: Transition, n: int = 1) -> None:
        if n:
            self.counts.conflicts += n
            instruments().state_transition_conflicts.add(n, {"transition": transition})
            log.warning("%d stale %s move(s): this worker no longer owns the job(s)", n, transition)

    def _poke(self) -> None:
        """Wake the fetcher (new jobs were announced)."""
        self._woken = True
        self._wakes.notify()

    def _active(self) -> None:
        self._last_active = time.monotonic()
        self._activity.notify()

    # ------------------------------------------------------------------ public view
    @property
    def stats(self) -> dict[str, int]:
        """The counters as a plain dict (a snapshot; :attr:`counts` is the typed, live object)."""
        return self.counts.as_dict()

    @property
    def busy(self) -> bool:
        """Holding any job: buffered, being started, running, or with its outcome not yet recorded."""
        return self.slots.busy

    @property
    def stopping(self) -> bool:
        return self.slots.stopping

    @property
    def started_at(self) -> datetime | None:
        """The database's clock when this worker connected (None before): rows under its id that
        are older belong to a predecessor with the same name."""
        return self.reconciler.since

    @property
    def running(self) -> Mapping[str, Running]:
        """Jobs started and not yet finalised (a live view)."""
        return self.slots.running

    @property
    def executing(self) -> set[str]:
        """Ids of the jobs whose handlers are still running (a live view)."""
        return self.slots.executing

    @property
    def buffer(self) -> deque[JobRecord]:
        """Jobs claimed into the prefetch buffer, not yet started (a live view)."""
        return self.slots.buffer

    def wake(self) -> None:
        """Fetch now instead of at the next poll, and count this as activity for :meth:`until_idle`
        (a caller that knows new work is due). Call it on the worker's event loop."""
        self._active()
        self._poke()

    async def until_idle(self, idle_seconds: float, *, max_seconds: float = math.inf) -> None:
        """Return once the worker has held no job for ``idle_seconds`` (counted from its first
        claim, the last job it finished, the last claim that brought jobs, or the last
        :meth:`wake`), after ``max_seconds`` at the most, or as soon as it stops. It does not stop
        the worker. Before its first claim it is not idle, however long the start-up takes (a
        loaded machine, a database waking up): it has not looked for work yet."""
        deadline = time.monotonic() + max_seconds
        while not self._ended:
            now = time.monotonic()
            if self.slots.busy or not self.counts.fetches:
                self._last_active = now
            remaining = min(deadline, self._last_active + idle_seconds) - now
            if remaining <= 0:
                return
            await self._activity.changed(remaining)

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

    def stop(self) -> None:
        """Ask the worker to shut down gracefully (safe from any thread or signal handler)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._begin_stop)
        else:
            self.slots.stopping = True

    def _begin_stop(self) -> None:
        if not self.slots.stopping:
            log.info("worker %s stopping: no more fetches", self.id)
        # Every wait in the fetch and start loops, and every backoff sleep, ends.
        self.slots.stop()
        self._wakes.notify()
        self.reconciler.changes.notify()

    # ------------------------------------------------------------------ lifecycle
    def run(self, *, install_signals: bool = True) -> None:
        """Run on a loop of its own (Execution.EventLoop) until stopped."""
        with asyncio.Runner(loop_factory=loop_factory(self.settings.execution.event_loop)) as runner:
            runner.run(self.run_async(install_signals=install_signals))

    async def run_async(self, *, install_signals: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._loop.add_signal_handler(sig, self._begin_stop)
        async with contextlib.AsyncExitStack() as stack:
            # Teardown runs in the reverse order of these lines, so each part outlives what uses
            # it: first the shutdown (release the buffer, let handlers end and their outcomes reach
            # the database), while the helpers (heartbeat, completer) still serve it; then the
            # helpers are cancelled; then the wake-ups (NOTIFY listener, enqueue subscription) and
            # the sweep thread stop; the gauge drops; last, the thread pools go and until_idle
            # returns.
            stack.callback(self._closed)
            await self._wait_for_database()
            await stack.enter_async_context(self._driven())
            stack.enter_context(self._counted())
            stack.enter_context(self._sweeping())
            stack.enter_context(self._wakeups())
            await stack.enter_async_context(self._helpers())
            stack.push_async_callback(self._shutdown)
            log.info(
                "worker %s started: queues=%s concurrency=%d prefetch=%d",
                self.id,
                self.queues or "all",
                self.concurrency,
                self.prefetch,
            )
            await self._dispatch_loop()
        if self.failure is not None:
            raise HelperDied(f"worker {self.id} stopped because a helper task ended: {self.failure}")

    @contextlib.contextmanager
    def _counted(self) -> Iterator[None]:
        instruments().workers_active.add(1)
        try:
            yield
        finally:
            instruments().workers_active.add(-1)

    @contextlib.contextmanager
    def _sweeping(self) -> Iterator[None]:
        """The sweep in a thread of its own, for a worker that also sweeps (``with_sweep``)."""
        stop = threading.Event()
        if self.with_sweep:
            from chokaq.runtime.sweeper import sweep_forever

            args = (self.storage, self.settings, stop, self.app.bus)
            threading.Thread(target=sweep_forever, args=args, daemon=True).start()
        try:
            yield
        finally:
            stop.set()

    @contextlib.contextmanager
    def _wakeups(self) -> Iterator[None]:
        """What makes the fetcher claim before its next poll: a NOTIFY (PostgreSQL, from a listener
        thread) or an enqueue through this process's storage."""
        loop = self._loop
        assert loop is not None

        def wake_soon() -> None:
            loop.call_soon_threadsafe(self._poke)

        stop = threading.Event()
        if self.settings.storage.listen_notify and self.storage.supports_notify:
            from chokaq.storage.notify import listen

            args = (self.storage.url, wake_soon, stop, self._listening)
            threading.Thread(target=listen, args=args, daemon=True, name="chokaq-listen").start()
        unsubscribe = self.storage.on_enqueue(wake_soon)
        try:
            yield
        finally:
            unsubscribe()
            stop.set()

    def _helpers(self) -> Supervisor:
        helpers = Supervisor(self._helper_died)
        helpers.start("chokaq-heartbeat", self.heartbeat.run())
        helpers.start("chokaq-finalize", self.completer.run())
        if self.outage.health_file is not None:
            helpers.start("chokaq-health", write_health_forever(self.outage))
        if self.settings.storage.refresh_statistics and self.storage.supports_statistics_refresh:
            slots = self.slots
            helpers.start(
                "chokaq-statistics",
                refresh_statistics_forever(self.storage, self.outage, db=self._db, backlog=lambda: slots.backlog),
            )
        return helpers

    def _closed(self) -> None:
        self._db_pool.shutdown(wait=False)
        self._job_pool.shutdown(wait=False)
        self._ended = True
        self._activity.notify()
        self.outage.clear_health()
        log.info("worker %s stopped: %s", self.id, self.stats)

    def _helper_died(self, reason: str) -> None:
        self.failure = reason
        self._begin_stop()

    async def _wait_for_database(self) -> None:
        """Start-up: wait for the database with capped backoff, one line per try, instead of
        exiting (a container that starts during a failover). Only a transient error is waited
        out: a wrong password or URL fails at once."""
        attempt = 0
        while not self.slots.stopping:
            try:
                self.reconciler.since = await self._db(self.storage.ping)
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
        if self.slots.stopping:
            await asyncio.sleep(0)
            return
        await changes.until(lambda: self.slots.stopping, self._wakes, timeout=seconds)

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

    # ------------------------------------------------------------------ dispatch
    async def _dispatch_loop(self) -> None:
        # Fetching and starting run side by side: a start never waits behind a fetch round trip.
        # While there is a backlog a second fetcher and a second starter keep one more round trip
        # of each in flight; idle, only the first fetcher polls.
        loops = [self._fetch_loop(primary=True), self._fetch_loop(primary=False)]
        loops += [self._start_loop(), self._start_loop()]
        await asyncio.gather(*(asyncio.create_task(loop) for loop in loops))

    def _poll_interval(self) -> float:
        storage = self.settings.storage
        return storage.idle_polling_interval if self._listening.is_set() else storage.polling_interval

    async def _fetch_loop(self, *, primary: bool) -> None:
        slots = self.slots
        while not slots.stopping:
            size = await self._claim_size(primary=primary)
            if self.reconciler.due:
                # Here, not right after the claim: the jobs it returned are launched or buffered
                # first, so the reconcile counts them as held.
                await self.reconciler.reconcile()
                continue
            if size is None:  # stopping (Slots.claim_size is None once stopping)
                continue
            want, start_now = size
            if primary:
                self._woken = False  # a NOTIFY from here on is for jobs this claim may miss
            if self.outage.over_budget():
                # Past Storage.OutageTolerance: claim nothing, only probe until the database is back.
                await self._probe()
                continue
            jobs = await self._claim(want, start_now=start_now)
            if jobs and start_now:
                self._launch(jobs)
                # Let the handlers begin before counting free slots again: those that finish at
                # once leave their slots idle for the next claim instead of sending it to the buffer.
                await asyncio.sleep(0)
            elif jobs:
                slots.add_buffered(jobs)
                self._active()
            elif primary and jobs is not None:
                # Nothing due: sleep until the poll interval passes or a NOTIFY/stop wakes us.
                await self._wakes.until(lambda: self._woken or slots.stopping, timeout=self._poll_interval())

    async def _claim_size(self, *, primary: bool) -> tuple[int, bool] | None:
        """Wait until this fetcher has something to claim (see Slots.claim_size), a reconcile is
        due, or the worker stops."""
        size: tuple[int, bool] | None = None

        def ready() -> bool:
            nonlocal size
            size = self.slots.claim_size(primary=primary)
            return size is not None or self.slots.stopping or self.reconciler.due

        slots = self.slots
        await changes.until(ready, slots.slot, slots.room, self.reconciler.changes)
        return size

    async def _claim(self, want: int, *, start_now: bool) -> list[JobRecord] | None:
        """One claim; None if it failed (after the backoff wait)."""
        try:
            with self.slots.claiming(want, start=start_now):
                jobs = await self._claimed(want, start_now=start_now)
        except Exception as exc:
            # From the busy interval even while LISTEN is up: the idle one (seconds) would stall
            # the worker after one failed claim, though the failure says nothing about new jobs.
            delay = backoff(self._fetch_failures, base=self.settings.storage.polling_interval)
            self._fetch_failures += 1
            self.outage.failed("claim", exc, delay)
            await self._sleep(delay)
            return None
        self.counts.fetches += 1
        if self.counts.fetches == 1:
            self._active()  # the first look for work: until_idle counts idleness from here
        self._fetch_failures = 0
        self.slots.claimed(len(jobs), want)
        return jobs

    def _claimed(self, want: int, *, start_now: bool) -> Awaitable[list[JobRecord]]:
        """The claim: on this loop where the storage can (see storage/loop_driver.py), else on a
        database thread."""
        options: dict[str, Any] = {
            "start": start_now,
            "zombie_retry_types": self._zombie_retry_types,
            "skip": list(self.slots.running),
        }
        driver = self._driver()
        if driver is not None and self.storage.fetches_on_loop(self.queues):
            fetch = self.storage.fetch_on_loop
            return self.reconciler.move_on_loop(
                lambda seen: fetch(driver, self.id, want, self.queues, seen=seen, **options)
            )
        return self.reconciler.move(functools.partial(self.storage.fetch, self.id, want, self.queues, **options))

    async def _start_loop(self) -> None:
        while batch := await self.slots.jobs_to_start():
            try:
                await self._start_batch(batch)
            finally:
                self.slots.start_ended(batch)
                self._active()  # started, back in the buffer, or lost: a change either way

    async def _start_batch(self, batch: list[JobRecord]) -> None:
        self.slots.starting(batch)
        try:
            result = await self.reconciler.move(
                functools.partial(self.storage.start, self.id, batch, self._zombie_retry_types)
            )
            self._start_failures = 0
        except Exception as exc:
            # Back to the buffer: a start that committed unheard is found by the next one, and
            # until then the heartbeat keeps the lease it stamped (Slots.unsure_leases).
            self.slots.requeue(batch)
            delay = backoff(self._start_failures, base=self.settings.storage.polling_interval)
            self._start_failures += 1
            self.outage.failed("start", exc, delay)
            await self._sleep(delay)
            return
        self.slots.start_settled(batch)
        self._conflict("start", len(result.lost))
        self._launch(result.started)

    def _launch(self, started: list[JobRecord]) -> None:
        """Run the handlers of jobs now Processing."""
        now = datetime.now(UTC).replace(tzinfo=None)
        lag = instruments().queue_lag
        # Looked up once per batch: asking OpenTelemetry for its provider is not free.
        traced = tracing_active()
        slots, worker_id = self.slots, self.id
        watched: dict[float, list[Running]] = {}  # by timeout: one deadline each for this batch
        timeouts: dict[str, float] = {}  # by job type, for this batch
        for rec in started:
            if rec.id in slots.running:
                # Never a second run of one job here (a reconcile and a replayed start both
                # handing over the same row would be a bug; this keeps it from running twice).
                log.error("job %s is already running in this worker; not starting it again", rec.id)
                continue
            if rec.scheduled_at_utc is not None:
                lag.record(max(0.0, (now - rec.scheduled_at_utc).total_seconds() * 1000), self._attributes(rec))
            ctx = JobContext(
                job_id=rec.id, attempt=rec.attempt_count, queue=rec.queue, type=rec.type, worker_id=worker_id
            )
            run = Running(record=rec, lease=rec.lease, ctx=ctx, traced=traced)
            slots.launched(run)
            timeout = timeouts.get(rec.type)
            if timeout is None:
                timeout = timeouts[rec.type] = self._timeout_for(rec.type)
            watched.setdefault(timeout, []).append(run)
            # Unnamed: a name is a string built per job that only a debugger would read.
            run.task = asyncio.create_task(self._execute(run))
        self.counts.started += sum(len(runs) for runs in watched.values())
        assert self._loop is not None
        for timeout, runs in watched.items():
            self.deadlines.watch(self._loop, runs, timeout)
        self._active()

    def _attributes(self, rec: JobRecord) -> dict[str, str]:
        """A job's metric attributes (queue and type): one dict per pair, kept, instead of one per
        job and metric. Bounded, for a worker that meets very many queues or types."""
        key = (rec.queue, rec.type)
        attributes = self._metric_attributes.get(key)
        if attributes is None:
            if len(self._metric_attributes) >= 1024:
                self._metric_attributes.clear()
            attributes = self._metric_attributes[key] = {"queue": rec.queue, "type": rec.type}
        return attributes

    # ------------------------------------------------------------------ execute
    async def _execute(self, run: Running) -> None:
        rec = run.record
        handler = self.app.handlers.get(rec.type)
        t0 = time.perf_counter()
        # Without a configured tracer provider every span is a no-op that still costs a job a
        # noticeable share of its bookkeeping; the untraced path has none.
        if run.traced:
            outcome = await self._run_traced(run, handler)
        else:
            outcome = await self._run_handler(run, handler, None)
        outcome.duration_ms = int((time.perf_counter() - t0) * 1000)
        instruments().processing_duration.record(outcome.duration_ms, self._attributes(rec))
        self.deadlines.ended(run)
        self.slots.handler_ended(rec.id)
        self.completer.put(outcome)

    async def _run_traced(self, run: Running, handler: Handler | None) -> Outcome:
        rec = run.record
        with tracer().start_as_current_span(f"chokaq.job {rec.type}") as span:
            if span.is_recording():
                span.set_attributes(
                    {
                        "chokaq.job.id": rec.id,
                        "chokaq.queue": rec.queue,
                        "chokaq.job.type": rec.type,
                        "chokaq.attempt": rec.attempt_count,
                        "chokaq.worker": self.id,
                    }
                )
            outcome = await self._run_handler(run, handler, span)
            if outcome.reason == FailureReason.TIMEOUT:
                span.set_attribute("chokaq.timeout", True)
            span.set_attribute("chokaq.outcome", outcome.kind)
        return outcome

    async def _run_handler(self, run: Running, handler: Handler | None, span: Span | None) -> Outcome:
        """Run the handler and say what its run came to (never raises)."""
        rec = run.record
        try:
            if handler is None:
                raise _Rejected(f"no handler is registered for job type {rec.type!r} on worker {self.id}")
            payload = handler.parse_payload(rec.payload)
            args: tuple[object, ...] = (payload, run.ctx) if handler.wants_ctx else (payload,)
            # Its deadline (deadlines.py) cancels the task; a thread cannot be killed, so
            # cooperative plain handlers see ctx.cancelled and stop.
            if handler.is_async:
                await handler.fn(*args)
            else:
                run.thread = self._job_pool.submit(contextvars.copy_context().run, handler.fn, *args)
                await asyncio.wrap_future(run.thread)
            return outcomes.succeeded(rec, run.lease)
        except _Rejected as exc:
            return outcomes.rejected(rec, run.lease, str(exc))
        except asyncio.CancelledError as exc:
            return self._cancelled_outcome(run, exc)
        except BaseException as exc:
            if span is not None:
                span.record_exception(exc)
            if run.ctx.is_cancelled():
                # Stopped by us (timeout, shutdown, lost ownership), whatever it raised on the way out.
                return self._cancelled_outcome(run, exc)
            # A TimeoutError of the handler's own (an HTTP call, say) is an ordinary failure.
            return self._failure_outcome(run, handler, exc)

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
            if left or o.kind == "drop":
                self.reconciler.leave(o.record.id, o.lease.attempt)
        self.slots.finished(o.record.id for o in finished)
        self._active()

    def _cancel(self, run: Running, reason: CancelReason) -> None:
        run.ctx.cancel(reason)
        if run.task is not None and not run.task.done():
            run.task.cancel()

    # ------------------------------------------------------------------ shutdown
    async def _shutdown(self) -> None:
        ex = self.settings.execution
        pending = self.slots.take_buffer()
        unsure = set(self.slots.unsure)
        if unsure:
            # A start may have committed unheard: of jobs back in the buffer (the release cannot
            # move those, they are Processing), or of a batch whose start was cancelled in flight
            # (a cancelled run_async). The reconcile below gives them back to Pending.
            self.reconciler.suspect()
        if pending:
            try:
                released = await self._db(self.storage.release, self.id, [j.lease for j in pending])
                log.info("released %d buffered jobs to Pending", len(released))
                # Not released and not unsure: taken from us. The unsure ones are the reconcile's.
                self._conflict("release", len({j.id for j in pending} - set(released) - unsure))
            except Exception:
                log.exception("release failed; the sweep will return them after Recovery.FetchedJobTimeout")
        tasks = [r.task for r in self.slots.running.values() if r.task is not None and not r.task.done()]
        if tasks:
            log.info("waiting up to %.0fs for %d running handlers", ex.shutdown_grace, len(tasks))
            _, still = await asyncio.wait(tasks, timeout=ex.shutdown_grace)
            if still:
                for r in list(self.slots.running.values()):
                    if r.task in still:
                        self._cancel(r, CANCEL_SHUTDOWN)
                await asyncio.wait(still, timeout=5.0)
        await self._outcomes_written()
        if self.reconciler.due:
            await self.reconciler.reconcile()

    async def _outcomes_written(self) -> None:
        """Let every outcome reach the database before the heartbeat stops: for 30 s, and during an
        outage for as long as the outage budget allows."""
        deadline = time.monotonic() + 30

        def riding_out() -> bool:
            return self.outage.down_since is not None and not self.outage.over_budget()

        # Re-checked on every change, and at least twice a second for the clock and the outage.
        while self.slots.running and (time.monotonic() < deadline or riding_out()):
            await self.slots.slot.until(lambda: not self.slots.running, timeout=0.5)


class _Rejected(Exception):
    pass
