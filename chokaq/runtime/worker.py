"""A worker: claims batches (straight into Processing for idle slots, else into a prefetch buffer),
runs handlers with a concurrency limit, keeps their heartbeats fresh in one statement per tick,
and finalises outcomes in batches.

This module holds the composition and the lifecycle (start-up, the helpers, shutdown). Each
collaborator owns one thing: fetching.py (the fetch loops and claims), starting.py (the start loops
and launching handlers), execution.py (running a handler to its outcome), slots.py (what the worker
holds and may claim or start), changes.py (waiting on that), reconcile.py (what lost replies left
behind), outcomes.py (what a run's ending becomes), completer.py (writing outcomes), heartbeat.py
(leases), supervisor.py (helper tasks that must not die unnoticed), outage.py (riding out the
database), planner_statistics.py (planner statistics on PostgreSQL) and health.py (the health file). Every
database call goes through the worker's :class:`~chokaq.storage.WorkerStore`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import socket
import threading
import uuid
from collections import deque
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from chokaq.domain.backoff import backoff
from chokaq.domain.models import JobRecord, Lease
from chokaq.domain.schedules import ScheduleError
from chokaq.domain.workers import WorkerIdentity
from chokaq.runtime.activity import Activity
from chokaq.runtime.breakers import BreakerGuard
from chokaq.runtime.completer import Completer
from chokaq.runtime.deadlines import Deadlines
from chokaq.runtime.execution import Execution
from chokaq.runtime.fetching import Fetcher
from chokaq.runtime.handlers import CANCEL_TIMEOUT
from chokaq.runtime.health import write_health_forever
from chokaq.runtime.heartbeat import Heartbeat
from chokaq.runtime.loops import loop_factory
from chokaq.runtime.outage import Outage
from chokaq.runtime.outcomes import Outcome
from chokaq.runtime.planner_statistics import refresh_statistics_forever
from chokaq.runtime.presence import Presence
from chokaq.runtime.reconcile import Reconciler
from chokaq.runtime.running import Running
from chokaq.runtime.schedules import fire_forever
from chokaq.runtime.shutdown import drain
from chokaq.runtime.slots import Slots
from chokaq.runtime.starting import Starter
from chokaq.runtime.supervisor import HelperDied, Supervisor
from chokaq.runtime.worker_stats import Transition, WorkerStats
from chokaq.storage import WorkerPresence, is_transient, listen, require_current
from chokaq.telemetry import instruments

if TYPE_CHECKING:  # for the annotation only: app imports this module, never the reverse
    from chokaq.runtime.app import ChokaQ

log = logging.getLogger("chokaq.worker")


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
        lifecycle_level: int = logging.INFO,
    ) -> None:
        self.app = app
        # started/stopping/stopped: INFO for a standing worker; a caller that runs short slices
        # (the Functions drain) lowers them and logs one summary line per slice instead.
        self.lifecycle_level = lifecycle_level
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
        # Every database call of this worker, on its threads or (PostgreSQL) on its event loop.
        self.store = self.storage.for_worker(self.id)
        self.activity = Activity()
        self.reconciler = Reconciler(self.store, self.outage, self.slots, adopted=self.activity.touch)
        self._loop: asyncio.AbstractEventLoop | None = None
        zombie_retry_types = {h.name for h in app.handlers.values() if h.retry_zombies}
        # The Workers row (docs/workers.md): written at start, beside each heartbeat tick, and at a clean exit.
        self.presence = self._presence()
        self.heartbeat = Heartbeat(ex, self.outage, store=self.store, runs=self, on_tick=self.presence.tick)
        self.breakers = BreakerGuard.for_handlers(
            self.store,
            app.handlers,
            ex.circuit_breaker,
            events=app.bus,
            probe_interval=self.settings.storage.polling_interval,
        )
        self.completer = Completer(self.store, self, self.outage, self.counts, events=app.bus, breakers=self.breakers)
        self.deadlines = Deadlines(lambda run: run.cancel(CANCEL_TIMEOUT))
        collaborators = (self.slots, self.deadlines, self.heartbeat, self.completer)
        self.execution = Execution(
            app.handlers, self.settings, self.id, self.concurrency, *collaborators, note_stopped=self.store.note_stopped
        )
        parts = (self.store, self.slots, self.reconciler, self.outage, self.counts, self.activity)
        self.starter = Starter(
            *parts,
            self.execution,
            self.deadlines,
            self.settings.storage,
            zombie_retry_types,
            breakers=self.breakers,
        )
        self.fetcher = Fetcher(
            *parts,
            self.settings.storage,
            zombie_retry_types,
            self.queues,
            self.starter.launch,
            breakers=self.breakers,
        )
        self.failure: str | None = None  # why a helper task's death stopped the worker

    def _presence(self) -> Presence:
        from chokaq import __version__  # the package has finished importing by now, not when this module loads

        served = tuple(self.queues) if self.queues else None
        host = socket.gethostname()[:255]
        identity = WorkerIdentity(self.id, host, os.getpid(), __version__, served, self.concurrency)
        slots = self.slots
        return Presence(WorkerPresence(self.storage, identity), self.store.call, lambda: len(slots.running), self.id)

    # ------------------------------------------------------------------ what collaborators report
    def conflict(self, transition: Transition, n: int = 1) -> None:
        """``n`` moves found their jobs no longer ours (see :meth:`WorkerStats.conflict`)."""
        self.counts.conflict(transition, n)

    def unsure_leases(self) -> list[Lease]:
        """Leases of jobs whose start may have committed unheard (see :meth:`Slots.unsure_leases`)."""
        return self.slots.unsure_leases(self.id)

    def recorded(self, finished: list[Outcome]) -> None:
        """Outcomes the completer recorded: their slots free up."""
        self._done(finished, left=False)

    def abandoned(self, finished: list[Outcome]) -> None:
        """Outcomes the completer left to the sweep: their slots free up, and no reconcile hands
        their jobs on."""
        self._done(finished, left=True)

    def _done(self, finished: list[Outcome], *, left: bool) -> None:
        for o in finished:
            if left or o.kind == "drop":
                self.reconciler.leave(o.record.id, o.lease.attempt)
        self.slots.finished(o.record.id for o in finished)
        self.activity.touch()

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
        self.activity.touch()
        self.fetcher.poke()

    async def until_idle(self, idle_seconds: float, *, max_seconds: float = math.inf) -> None:
        """Return once the worker has held no job for ``idle_seconds`` (counted from its first
        claim, the last job it finished, the last claim that brought jobs, or the last
        :meth:`wake`), after ``max_seconds`` at the most, or as soon as it stops. It does not stop
        the worker. Before its first claim it is not idle, however long the start-up takes (a
        loaded machine, a database waking up): it has not looked for work yet."""
        slots, counts = self.slots, self.counts
        await self.activity.until_idle(idle_seconds, max_seconds, holding=lambda: slots.busy or not counts.fetches)

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
            log.log(self.lifecycle_level, "worker %s stopping: no more fetches", self.id)
        # Every wait in the fetch and start loops, and every backoff sleep, ends.
        self.slots.stop()
        self.reconciler.changes.notify()

    # ------------------------------------------------------------------ lifecycle
    def run(self, *, install_signals: bool = True) -> None:
        """Run on a loop of its own (Execution.EventLoop) until stopped."""
        with asyncio.Runner(loop_factory=loop_factory(self.settings.execution.event_loop)) as runner:
            runner.run(self.run_async(install_signals=install_signals))

    async def run_async(self, *, install_signals: bool = False) -> None:
        """Run on the calling event loop until stopped."""
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
            # Refuse, with the fix, rather than fail outcomes half-way on an older schema.
            await asyncio.to_thread(require_current, self.storage)
            await self._sync_schedules()
            if not self.slots.stopping:
                # Marked stopped once everything else has wound down (this runs after the
                # drain and the helpers' end): a worker still draining is live.
                await self.presence.start()
                stack.push_async_callback(self.presence.stop)
            await stack.enter_async_context(self.store.on_loop())
            stack.enter_context(self._counted())
            stack.enter_context(self._sweeping())
            stack.enter_context(self._wakeups())
            await stack.enter_async_context(self._helpers())
            stack.push_async_callback(self._drain)
            log.log(
                self.lifecycle_level,
                "worker %s started: queues=%s concurrency=%d prefetch=%d",
                self.id,
                self.queues or "all",
                self.concurrency,
                self.prefetch,
            )
            await self._dispatch()
        if self.failure is not None:
            raise HelperDied(f"worker {self.id} stopped because a helper task ended: {self.failure}")

    async def _dispatch(self) -> None:
        # Fetching and starting run side by side: a start never waits behind a fetch round trip.
        # While there is a backlog a second fetcher and a second starter keep one more round trip
        # of each in flight; idle, only the first fetcher polls.
        loops = [self.fetcher.run(primary=True), self.fetcher.run(primary=False)]
        loops += [self.starter.run(), self.starter.run()]
        await asyncio.gather(*(asyncio.create_task(loop) for loop in loops))

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

            # Its handlers are loaded here: their verify judges the zombies it buries.
            args = (self.storage, self.settings, stop, self.app.bus, self.breakers is not None, self.app.handlers)
            threading.Thread(target=sweep_forever, args=args, daemon=True).start()
        try:
            yield
        finally:
            stop.set()

    @contextlib.contextmanager
    def _wakeups(self) -> Iterator[None]:
        """What makes the fetcher claim before its next poll: a NOTIFY (PostgreSQL, from a listener
        thread) or an enqueue through this process's storage; and what stops a handler at once when
        an operator cancels its job through this process or, on PostgreSQL, any (else the heartbeat
        finds it)."""
        loop = self._loop
        assert loop is not None

        def wake_soon() -> None:
            loop.call_soon_threadsafe(self.fetcher.poke)

        def cancel_soon(payload: str) -> None:
            loop.call_soon_threadsafe(self.heartbeat.operator_cancelled, payload)

        stop = threading.Event()
        if self.settings.storage.listen_notify and self.storage.supports_notify:
            args = (self.storage.url, wake_soon, stop, self.fetcher.listening, cancel_soon)
            threading.Thread(target=listen, args=args, daemon=True, name="chokaq-listen").start()
        unsubscribe = self.storage.on_enqueue(wake_soon)
        unsubscribe_cancel = self.storage.wakeups.on_cancel(cancel_soon)
        try:
            yield
        finally:
            unsubscribe()
            unsubscribe_cancel()
            stop.set()

    def _helpers(self) -> Supervisor:
        helpers = Supervisor(self._helper_died)
        helpers.start("chokaq-heartbeat", self.heartbeat.run())
        helpers.start("chokaq-finalize", self.completer.run())
        if self.outage.health_file is not None:
            helpers.start("chokaq-health", write_health_forever(self.outage))
        helpers.start("chokaq-schedules", fire_forever(self.storage, self.settings))
        if self.settings.storage.refresh_statistics and self.storage.supports_statistics_refresh:
            slots = self.slots
            helpers.start(
                "chokaq-statistics",
                refresh_statistics_forever(self.store, self.outage, backlog=lambda: slots.backlog),
            )
        return helpers

    def _closed(self) -> None:
        self.store.close()
        self.execution.close()
        self.activity.end()
        self.outage.clear_health()
        log.log(self.lifecycle_level, "worker %s stopped: %s", self.id, self.stats)

    async def _drain(self) -> None:
        grace = self.settings.execution.shutdown_grace
        await drain(self.store, self.slots, self.reconciler, self.outage, self.counts, grace=grace)

    def _helper_died(self, reason: str) -> None:
        self.failure = reason
        self._begin_stop()

    async def _sync_schedules(self) -> None:
        """The code's schedules into the table. A bad schedule stops the start-up (ScheduleError);
        a database that cannot take them now (away again, or not yet upgraded to the Schedules
        table) does not: the worker runs its jobs, and fires the stored schedules when it can."""
        try:
            await asyncio.to_thread(self.app.sync_schedules)
        except ScheduleError:
            raise
        except Exception as exc:
            log.warning(
                "worker %s: the code's schedules were not stored (%s: %s); run `chokaq db upgrade` if the "
                "Schedules table is missing",
                self.id,
                type(exc).__name__,
                str(exc).strip().splitlines()[0][:200] if str(exc).strip() else "",
            )

    async def _wait_for_database(self) -> None:
        """Start-up: wait for the database with capped backoff, one line per try, instead of
        exiting (a container that starts during a failover). Only a transient error is waited
        out: a wrong password or URL fails at once."""
        attempt = 0
        while not self.slots.stopping:
            try:
                self.reconciler.since = await self.store.ping()
                self.outage.succeeded()
                self.outage.write_health()
                return
            except Exception as exc:
                if not is_transient(exc):
                    raise
                delay = backoff(attempt)
                self.outage.failed("start-up", exc, delay)
                attempt += 1
                await self.slots.sleep(delay)
