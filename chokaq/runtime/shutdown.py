"""A worker's graceful stop, once its fetchers have stopped: what it holds is given back or let
finish, and nothing is left behind that the worker could still settle itself. What is left (a
handler that would not stop, an outcome the database would not take) the sweep recovers."""

from __future__ import annotations

import asyncio
import logging
import time

from chokaq.runtime.handlers import CANCEL_SHUTDOWN
from chokaq.runtime.outage import Outage
from chokaq.runtime.reconcile import Reconciler
from chokaq.runtime.slots import Slots
from chokaq.runtime.worker_stats import WorkerStats
from chokaq.storage import WorkerStore

log = logging.getLogger("chokaq.worker")


async def drain(
    store: WorkerStore, slots: Slots, reconciler: Reconciler, outage: Outage, counts: WorkerStats, *, grace: float
) -> None:
    """Give the buffer back, let the handlers end (cancelled after ``grace`` seconds, then given
    five more), wait for their outcomes to be written, and reconcile if a lost reply is suspected."""
    pending = slots.take_buffer()
    unsure = set(slots.unsure)
    if unsure:
        # A start may have committed unheard: of jobs back in the buffer (the release cannot
        # move those, they are Processing), or of a batch whose start was cancelled in flight
        # (a cancelled run_async). The reconcile below gives them back to Pending.
        reconciler.suspect()
    if pending:
        try:
            released = await store.release([j.lease for j in pending])
            log.info("released %d buffered jobs to Pending", len(released))
            # Not released and not unsure: taken from us. The unsure ones are the reconcile's.
            counts.conflict("release", len({j.id for j in pending} - set(released) - unsure))
        except Exception:
            log.exception("release failed; the sweep will return them after Recovery.FetchedJobTimeout")
    tasks = [r.task for r in slots.running.values() if r.task is not None and not r.task.done()]
    if tasks:
        log.info("waiting up to %.0fs for %d running handlers", grace, len(tasks))
        _, still = await asyncio.wait(tasks, timeout=grace)
        if still:
            for r in list(slots.running.values()):
                if r.task in still:
                    r.cancel(CANCEL_SHUTDOWN)
            await asyncio.wait(still, timeout=5.0)
    await _outcomes_written(slots, outage)
    if reconciler.due:
        await reconciler.reconcile()


async def _outcomes_written(slots: Slots, outage: Outage) -> None:
    """Let every outcome reach the database before the heartbeat stops: for 30 s, and during an
    outage for as long as the outage budget allows."""
    deadline = time.monotonic() + 30

    def riding_out() -> bool:
        return outage.down_since is not None and not outage.over_budget()

    # Re-checked on every change, and at least twice a second for the clock and the outage.
    while slots.running and (time.monotonic() < deadline or riding_out()):
        await slots.slot.until(lambda: not slots.running, timeout=0.5)
