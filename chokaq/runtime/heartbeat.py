"""Keeps the leases of a worker's running jobs fresh: one statement per tick for all of them
(Execution.HeartbeatIntervalMin..Max, jittered so workers do not beat in step).

A write that fails counts towards Execution.HeartbeatFailureThreshold; past it the worker may
cancel its handlers (Execution.CancelOnHeartbeatFailure), since the sweep will soon take their jobs
for zombies. A job the database no longer shows as ours, while its handler still runs, has been
taken from us: its handler is cancelled and nothing is written for it."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence

from chokaq.domain.models import Lease
from chokaq.runtime.handlers import CANCEL_HEARTBEAT, CANCEL_LOST, CancelReason
from chokaq.runtime.outage import Outage
from chokaq.runtime.running import Running
from chokaq.runtime.stats import Transition
from chokaq.settings import ExecutionSettings
from chokaq.telemetry import instruments

# The worker's logger: these lines were the worker's before the heartbeat had a module of its own.
log = logging.getLogger("chokaq.worker")


class Heartbeat:
    def __init__(
        self,
        settings: ExecutionSettings,
        outage: Outage,
        *,
        write: Callable[[Sequence[Lease]], Awaitable[Collection[str]]],
        running: Mapping[str, Running],
        executing: Collection[str],
        cancel: Callable[[Running, CancelReason], None],
        conflict: Callable[[Transition, int], None],
        unsure: Callable[[], list[Lease]] = list,
    ) -> None:
        """``write`` refreshes the leases and returns the ids still ours; ``running`` and
        ``executing`` are the worker's live views (jobs not yet finalised; handlers still running);
        ``unsure`` gives the leases of jobs whose start may have committed unheard (see
        :meth:`Slots.unsure_leases`), renewed too."""
        self.settings = settings
        self.outage = outage
        self._write = write
        self._running = running
        self._executing = executing
        self._cancel = cancel
        self._conflict = conflict
        self._unsure = unsure
        self.failures = 0  # consecutive failed writes

    async def run(self) -> None:
        ex = self.settings
        while True:
            await asyncio.sleep(random.uniform(ex.heartbeat_interval_min, ex.heartbeat_interval_max))
            await self.beat()

    async def beat(self) -> None:
        """One tick: refresh every running job's lease."""
        ex = self.settings
        runs = list(self._running.values())
        unsure = self._unsure()
        if not runs and not unsure:
            return
        try:
            alive = await self._write([r.lease for r in runs] + unsure)
        except Exception as exc:
            self.outage.failed("heartbeat", exc)
            if not runs:
                # Only leases of starts that may have committed unheard: no handler runs, so this
                # is not a failure HeartbeatFailureThreshold counts (it would cancel the handler
                # started next on its first failed beat).
                return
            self.failures += 1
            ins = instruments()
            for r in runs:
                ins.heartbeat_failures.add(1, {"queue": r.record.queue, "type": r.record.type})
            if self.failures >= ex.heartbeat_failure_threshold:
                log.error("heartbeat degraded: %d consecutive write failures (%s)", self.failures, exc)
                if ex.cancel_on_heartbeat_failure:
                    for r in runs:
                        self._cancel(r, CANCEL_HEARTBEAT)
            else:
                log.warning("heartbeat write failed (%d in a row): %s", self.failures, exc)
            return
        self.failures = 0
        self.outage.succeeded()
        # Only handlers still running: a finished job's row may be gone because its outcome
        # committed unheard; the finaliser's replay tells that apart from a real loss.
        lost = [r for r in runs if r.lease.job_id not in alive and r.record.id in self._executing]
        if lost:
            self._conflict("heartbeat", len(lost))
            for r in lost:
                self._cancel(r, CANCEL_LOST)
