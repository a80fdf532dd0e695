"""Settling what lost replies left behind (see Storage.ambiguity and WorkerStore.claim).

Claims and starts are *takes*: ownership changes that a lost reply can hide from the worker. Every
take runs through :meth:`Reconciler.take`, which notes one that may have committed without our
hearing. Before its next claim the worker then reconciles: it finds the rows that carry its id but
that it does not hold, and settles them, so none is left to become a zombie. A Fetched one joins
the prefetch buffer (it is ours to start). A Processing one never ran here (every job the worker
started stays held until its outcome is recorded): it goes back to Pending with its attempt given
back, as if it had never been claimed.

New takes wait while a reconcile runs, and the ones in flight are let finish first: a row their
replies are about to hand us must not be taken for an orphan."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import TypeVar

from chokaq.domain.backoff import backoff
from chokaq.domain.models import JobRecord
from chokaq.domain.states import JobStatus
from chokaq.runtime.changes import Changes
from chokaq.runtime.outage import Outage
from chokaq.runtime.slots import Slots
from chokaq.storage import Take, WorkerStore

log = logging.getLogger("chokaq.worker")
T = TypeVar("T")


class Reconciler:
    def __init__(self, store: WorkerStore, outage: Outage, slots: Slots, *, adopted: Callable[[], None]) -> None:
        """``adopted`` is called when orphaned Fetched rows join the buffer (activity)."""
        self.store = store
        self.outage = outage
        self.slots = slots
        self.changes = Changes()  # a take or a reconcile began or ended, or one became due
        self._adopted = adopted
        self.since: datetime | None = None  # database clock at the worker's start: older rows are not ours
        self.due = False  # a take may have committed unheard
        self._takes = 0  # takes in flight
        self._running = False
        # Jobs this worker started and whose fate it leaves to the sweep (a handler thread that
        # would not stop, an outcome it could not write): a reconcile must never hand them on.
        # Keyed by id, the attempt they ran at: a later claim of the same job is a new one.
        self._left: dict[str, int] = {}

    def suspect(self) -> None:
        """Reconcile before the next claim, as after a take whose reply may have been lost. A plain
        flag (safe from any thread): the fetchers see it at their next turn."""
        self.due = True

    def leave(self, job_id: str, attempt: int) -> None:
        """The job's run at ``attempt`` is left to the sweep: never adopt or reschedule it."""
        self._left[job_id] = attempt

    async def take(self, take: Take[T]) -> T:
        """Run a claim or a start (see :meth:`WorkerStore.claim`): after any reconcile in progress,
        noting a lost reply (it calls :meth:`suspect`, from the loop or from its database thread)."""
        async with self._taking():
            result = await take(self.suspect)
        self.outage.succeeded()
        return result

    @contextlib.asynccontextmanager
    async def _taking(self) -> AsyncIterator[None]:
        await self.changes.until(lambda: not self._running)
        self._takes += 1
        try:
            yield
        finally:
            self._takes -= 1
            if not self._takes or self.due:
                self.changes.notify()

    async def reconcile(self) -> None:
        if self._running:
            await self.changes.until(lambda: not self._running)  # the other fetcher's covers this one
            return
        self._running = True
        self.changes.notify()  # new takes wait from here
        attempt = 0
        try:
            await self.changes.until(lambda: not self._takes)
            while True:
                try:
                    await self._settle()
                    return
                except Exception as exc:
                    if self.slots.stopping and self.outage.over_budget():
                        log.error("stopping without reconciling after a lost reply: the database is still away")
                        return
                    delay = backoff(attempt)
                    attempt += 1
                    self.outage.failed("reconcile", exc, delay)
                    await asyncio.sleep(delay)
        finally:
            self._running = False
            self.changes.notify()

    async def _settle(self) -> None:
        self.due = False
        stopping = self.slots.stopping
        rows = await self.store.owned(self.since)
        held = self.slots.held()
        orphans = [r for r in rows if r.id not in held and self._left.get(r.id) != r.attempt_count]
        fetched = [r for r in orphans if r.status == JobStatus.FETCHED]
        processing = [r for r in orphans if r.status == JobStatus.PROCESSING]
        await self._hand_on(fetched, processing, stopping=stopping)
        self.outage.succeeded()
        if orphans:
            log.warning(
                "reconciled after a lost reply: %d Fetched job(s) %s, %d never-started Processing "
                "job(s) back to Pending (attempt given back)",
                len(fetched),
                "released" if stopping else "adopted",
                len(processing),
            )

    async def _hand_on(self, fetched: list[JobRecord], processing: list[JobRecord], *, stopping: bool) -> None:
        if fetched and stopping:
            await self.store.release([r.lease for r in fetched])
        elif fetched:
            self.slots.add_buffered(fetched)
            self._adopted()
        if processing:
            await self.store.reschedule([r.lease for r in processing])
