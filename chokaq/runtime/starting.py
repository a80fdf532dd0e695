"""Starting jobs: the start loops take buffered jobs as slots free up and move them Fetched ->
Processing in one statement per batch (the last ownership check before user code runs), and
:meth:`Starter.launch` sets their handlers running, each under its batch's deadline. A claim that
starts its jobs at once hands them to :meth:`Starter.launch` too."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from datetime import UTC, datetime

from chokaq.domain.backoff import backoff
from chokaq.domain.models import JobRecord
from chokaq.runtime.activity import Activity
from chokaq.runtime.breakers import BreakerGuard
from chokaq.runtime.deadlines import Deadlines
from chokaq.runtime.execution import Execution
from chokaq.runtime.handlers import JobContext
from chokaq.runtime.outage import Outage
from chokaq.runtime.reconcile import Reconciler
from chokaq.runtime.running import Running
from chokaq.runtime.slots import Slots
from chokaq.runtime.worker_stats import WorkerStats
from chokaq.settings import StorageSettings
from chokaq.storage import WorkerStore
from chokaq.telemetry import instruments, tracing_active

log = logging.getLogger("chokaq.worker")


class Starter:
    def __init__(
        self,
        store: WorkerStore,
        slots: Slots,
        reconciler: Reconciler,
        outage: Outage,
        counts: WorkerStats,
        activity: Activity,
        execution: Execution,
        deadlines: Deadlines,
        settings: StorageSettings,
        zombie_retry_types: Collection[str],
        breakers: BreakerGuard | None = None,
    ) -> None:
        """``zombie_retry_types``: job types whose handlers retry zombies (Handler.retry_zombies).
        ``breakers``: the worker's circuit breakers (None: none is on)."""
        self.store = store
        self.slots = slots
        self.reconciler = reconciler
        self.execution = execution
        self.deadlines = deadlines
        self.outage = outage
        self.counts = counts
        self.settings = settings
        self.zombie_retry_types = zombie_retry_types
        self.activity = activity
        self._failures = 0  # starts failed in a row
        self.breakers = breakers

    async def run(self) -> None:
        """One start loop, until the worker stops."""
        while batch := await self.slots.jobs_to_start():
            try:
                await self._start_batch(batch)
            finally:
                self.slots.start_ended(batch)
                self.activity.touch()  # started, back in the buffer, or lost: a change either way

    async def _start_batch(self, batch: list[JobRecord]) -> None:
        if self.breakers is not None and self.breakers.blocked:
            batch = await self._hold_back(batch)
            if not batch:
                return
        self.slots.starting(batch)
        try:
            result = await self.reconciler.take(self.store.start(batch, self.zombie_retry_types))
            self._failures = 0
        except Exception as exc:
            # Back to the buffer: a start that committed unheard is found by the next one, and
            # until then the heartbeat keeps the lease it stamped (Slots.unsure_leases).
            self.slots.requeue(batch)
            delay = backoff(self._failures, base=self.settings.polling_interval)
            self._failures += 1
            self.outage.failed("start", exc, delay)
            await self.slots.sleep(delay)
            return
        self.slots.start_settled(batch)
        self.counts.conflict("start", len(result.lost))
        self.launch(result.started)

    async def _hold_back(self, batch: list[JobRecord]) -> list[JobRecord]:
        """Jobs claimed before their type's breaker opened go back to Pending, unstarted (their
        attempt count untouched); the rest of ``batch`` is returned to start. Should the release
        fail, they start: a run more is what the breaker saves, not what keeps a job safe."""
        assert self.breakers is not None
        held = [j for j in batch if self.breakers.holds(j)]
        if not held:
            return batch
        try:
            await self.store.release([j.lease for j in held])
        except Exception as exc:
            log.warning("could not give back %d job(s) behind an open circuit breaker: %s", len(held), exc)
            return batch
        return [j for j in batch if not self.breakers.holds(j)]

    def launch(self, started: list[JobRecord]) -> None:
        """Run the handlers of jobs now Processing."""
        now = datetime.now(UTC).replace(tzinfo=None)
        lag = instruments().queue_lag
        # Looked up once per batch: asking OpenTelemetry for its provider is not free.
        traced = tracing_active()
        slots, execution, store = self.slots, self.execution, self.store
        worker_id = store.worker_id
        log_limits = execution.log_limits
        watched: dict[float, list[Running]] = {}  # by timeout: one deadline each for this batch
        timeouts: dict[str, float] = {}  # by job type, for this batch
        for rec in started:
            if rec.id in slots.running:
                # Never a second run of one job here (a reconcile and a replayed start both
                # handing over the same row would be a bug; this keeps it from running twice).
                log.error("job %s is already running in this worker; not starting it again", rec.id)
                continue
            if rec.scheduled_at_utc is not None:
                lag.record(max(0.0, (now - rec.scheduled_at_utc).total_seconds() * 1000), execution.attributes(rec))
            ctx = JobContext(
                job_id=rec.id,
                attempt=rec.attempt_count,
                queue=rec.queue,
                type=rec.type,
                worker_id=worker_id,
                _log_limits=log_limits,
                _store=store,
            )
            run = Running(record=rec, lease=rec.lease, ctx=ctx, traced=traced)
            slots.launched(run)
            timeout = timeouts.get(rec.type)
            if timeout is None:
                timeout = timeouts[rec.type] = execution.timeout_for(rec.type)
            watched.setdefault(timeout, []).append(run)
            # Unnamed: a name is a string built per job that only a debugger would read.
            run.task = asyncio.create_task(execution.execute(run))
        self.counts.started += sum(len(runs) for runs in watched.values())
        loop = asyncio.get_running_loop()
        for timeout, runs in watched.items():
            self.deadlines.watch(loop, runs, timeout)
        self.activity.touch()
