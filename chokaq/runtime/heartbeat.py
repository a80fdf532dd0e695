"""Keeps the leases of a worker's running jobs fresh: one statement per tick for all of them
(Execution.HeartbeatIntervalMin..Max, jittered so workers do not beat in step).

A write that fails counts towards Execution.HeartbeatFailureThreshold; past it the worker may
cancel its handlers (Execution.CancelOnHeartbeatFailure), since the sweep will soon take their jobs
for zombies. A job the database no longer shows as ours, while its handler still runs, has been
taken from us: its handler is cancelled and nothing is written for it. If an operator cancelled it
(it is in the DLQ as Cancelled, at our attempt), the handler's ``ctx.cancel_reason`` says
``"cancelled"``, else ``"lost_ownership"``. On PostgreSQL the cancel's NOTIFY reaches
:meth:`Heartbeat.operator_cancelled` at once; the heartbeat is the fallback everywhere."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

from chokaq.domain.job_logs import JobNotes, Notes
from chokaq.domain.models import Lease
from chokaq.runtime.handlers import CANCEL_HEARTBEAT, CANCEL_LOST, CANCEL_OPERATOR
from chokaq.runtime.outage import Outage
from chokaq.runtime.running import Running
from chokaq.runtime.worker_stats import Transition
from chokaq.settings import ExecutionSettings
from chokaq.telemetry import instruments

log = logging.getLogger("chokaq.worker")


class LeaseStore(Protocol):
    """Where the leases are renewed (the worker's :class:`~chokaq.storage.WorkerStore`)."""

    async def heartbeat(self, leases: Sequence[Lease], notes: Mapping[str, Notes] | None = None) -> Collection[str]:
        """Refresh ``leases`` (writing the new ``notes`` of jobs that have any); the ids still ours."""
        ...

    async def cancelled_runs(self, leases: Sequence[Lease]) -> Collection[str]:
        """The ids among ``leases`` (runs we lost) that an operator cancelled."""
        ...


class Runs(Protocol):
    """The worker's side, as the heartbeat sees it (the :class:`~chokaq.runtime.worker.Worker`)."""

    @property
    def running(self) -> Mapping[str, Running]:
        """Jobs started and not yet finalised (a live view)."""
        ...

    @property
    def executing(self) -> Collection[str]:
        """Ids of the jobs whose handlers still run (a live view)."""
        ...

    def unsure_leases(self) -> list[Lease]:
        """Leases of jobs whose start may have committed unheard (see :meth:`Slots.unsure_leases`):
        renewed too."""
        ...

    def conflict(self, transition: Transition, n: int = 1) -> None:
        """Count ``n`` moves that found the job no longer ours."""
        ...


class Heartbeat:
    def __init__(
        self,
        settings: ExecutionSettings,
        outage: Outage,
        *,
        store: LeaseStore,
        runs: Runs,
        on_tick: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self.outage = outage
        self._store = store
        self._runs = runs
        # Called first on every tick, whether any lease is held or not: the worker's presence
        # (runtime/presence.py), which only starts its write and returns.
        self._on_tick = on_tick
        self.failures = 0  # consecutive failed writes

    async def run(self) -> None:
        ex = self.settings
        while True:
            await asyncio.sleep(random.uniform(ex.heartbeat_interval_min, ex.heartbeat_interval_max))
            await self.tick()

    async def tick(self) -> None:
        """One tick: the presence write started, then the leases refreshed."""
        if self._on_tick is not None:
            try:
                self._on_tick()
            except Exception:
                # Presence must never cost the leases their heartbeat.
                log.exception("the worker's presence tick failed")
        await self.beat()

    async def beat(self) -> None:
        """One tick: refresh every running job's lease."""
        ex = self.settings
        runs = list(self._runs.running.values())
        unsure = self._runs.unsure_leases()
        if not runs and not unsure:
            return
        # What handlers logged since the last tick rides on the same statement (chokaq.domain.job_logs).
        notes, marks = _unwritten(runs)
        try:
            leases = [r.lease for r in runs] + unsure
            alive = await (self._store.heartbeat(leases, notes) if notes else self._store.heartbeat(leases))
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
                        r.cancel(CANCEL_HEARTBEAT)
            else:
                log.warning("heartbeat write failed (%d in a row): %s", self.failures, exc)
            return
        self.failures = 0
        self.outage.succeeded()
        for job_notes, mark in marks:
            job_notes.written(mark)
        # Only handlers still running: a finished job's row may be gone because its outcome
        # committed unheard; the finaliser's replay tells that apart from a real loss.
        executing = self._runs.executing
        lost = [r for r in runs if r.lease.job_id not in alive and r.record.id in executing]
        if lost:
            cancelled = await self._cancelled_among(lost)
            taken = [r for r in lost if r.lease.job_id not in cancelled]
            if taken:
                self._runs.conflict("heartbeat", len(taken))
            for r in lost:
                r.cancel(CANCEL_OPERATOR if r.lease.job_id in cancelled else CANCEL_LOST)

    async def _cancelled_among(self, lost: Sequence[Running]) -> Collection[str]:
        try:
            return await self._store.cancelled_runs([r.lease for r in lost])
        except Exception as exc:
            # The handlers are stopped all the same; only the reason they are told is less exact.
            log.warning("could not read why %d running job(s) were taken: %s", len(lost), exc)
            return ()

    def operator_cancelled(self, payload: str) -> None:
        """A cancel's NOTIFY (storage/cancel.py): stop that run's handler now if it is ours and
        still running. Call it on the worker's event loop."""
        try:
            run_id = json.loads(payload)
            job_id, worker, attempt = str(run_id["id"]), run_id["worker"], int(run_id["attempt"])
        except (ValueError, KeyError, TypeError):
            log.warning("ignored a malformed cancel notification")
            return
        run = self._runs.running.get(job_id)
        if run is None or run.lease.worker_id != worker or run.lease.attempt != attempt:
            return
        if job_id in self._runs.executing and not run.ctx.is_cancelled():
            log.info("job %s cancelled by an operator: stopping its handler", job_id)
            run.cancel(CANCEL_OPERATOR)


def _unwritten(runs: Sequence[Running]) -> tuple[dict[str, Notes], list[tuple[JobNotes, tuple[int, int]]]]:
    """The new logs and progress of the running jobs that have any, and the marks that say so once
    written. Jobs that never logged have no buffer: a look at one attribute each."""
    notes: dict[str, Notes] = {}
    marks: list[tuple[JobNotes, tuple[int, int]]] = []
    for r in runs:
        job_notes = r.ctx._notes
        if job_notes is None:
            continue
        logs, progress, mark = job_notes.unwritten()
        if logs is not None or progress is not None:
            notes[r.lease.job_id] = Notes(logs, progress)
            marks.append((job_notes, mark))
    return notes, marks
