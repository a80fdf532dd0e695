"""Claiming jobs: the fetch loops ask the slots how many jobs to claim (see Slots.claim_size),
claim them in one statement, and either launch them at once (idle slots) or buffer them for the
start loops. Idle, only the primary fetcher polls, every PollingInterval (IdlePollingInterval while
LISTEN is up), or sooner when woken (a NOTIFY, an enqueue in this process, :meth:`Worker.wake`).
Claims go through the reconciler (reconcile.py), which notes a reply that may have been lost and
settles what it left before the next claim. Past Storage.OutageTolerance the fetchers claim
nothing and only probe the database."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Collection, Sequence

from chokaq.domain.backoff import backoff
from chokaq.domain.models import JobRecord
from chokaq.runtime import changes
from chokaq.runtime.activity import Activity
from chokaq.runtime.breakers import BreakerGuard
from chokaq.runtime.changes import Changes
from chokaq.runtime.outage import Outage
from chokaq.runtime.reconcile import Reconciler
from chokaq.runtime.slots import Slots
from chokaq.runtime.worker_stats import WorkerStats
from chokaq.settings import StorageSettings
from chokaq.storage import WorkerStore


class Fetcher:
    def __init__(
        self,
        store: WorkerStore,
        slots: Slots,
        reconciler: Reconciler,
        outage: Outage,
        counts: WorkerStats,
        activity: Activity,
        settings: StorageSettings,
        zombie_retry_types: Collection[str],
        queues: Sequence[str] | None,
        launch: Callable[[list[JobRecord]], None],
        breakers: BreakerGuard | None = None,
    ) -> None:
        """``launch`` runs the handlers of jobs a claim started (:meth:`Starter.launch`)."""
        self.store = store
        self.slots = slots
        self.reconciler = reconciler
        self.outage = outage
        self.counts = counts
        self.settings = settings
        self.queues = queues
        self.zombie_retry_types = zombie_retry_types
        self._launch = launch
        self.breakers = breakers  # None unless a handler has a circuit breaker
        self.activity = activity
        self.woken = False  # NOTIFY arrived or wake() was called: the primary fetcher claims now
        self.wakes = Changes()  # woken was set
        self.listening = threading.Event()  # LISTEN/NOTIFY is up: idle polls can be rarer
        self._failures = 0  # claims (or probes) failed in a row

    def poke(self) -> None:
        """Claim now (new jobs were announced)."""
        self.woken = True
        self.wakes.notify()

    def _poll_interval(self) -> float:
        storage = self.settings
        return storage.idle_polling_interval if self.listening.is_set() else storage.polling_interval

    async def run(self, *, primary: bool) -> None:
        """One fetch loop, until the worker stops."""
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
                self.woken = False  # a NOTIFY from here on is for jobs this claim may miss
            if self.outage.over_budget():
                # Past Storage.OutageTolerance: claim nothing, only probe until the database is back.
                await self._probe()
                continue
            if primary and self.breakers is not None:
                # Probes of half-open breakers (their types are left out of the claim below).
                probes = await self.breakers.claim_probes(self.queues)
                if probes:
                    slots.add_buffered(probes)
            jobs = await self._claim(want, start_now=start_now)
            if jobs and start_now:
                self._launch(jobs)
                # Let the handlers begin before counting free slots again: those that finish at
                # once leave their slots idle for the next claim instead of sending it to the buffer.
                await asyncio.sleep(0)
            elif jobs:
                slots.add_buffered(jobs)
                self.activity.touch()
            elif primary and jobs is not None:
                # Nothing due: sleep until the poll interval passes or a NOTIFY/stop wakes us.
                await changes.until(
                    lambda: self.woken or slots.stopping, self.wakes, slots.stopped, timeout=self._poll_interval()
                )

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
                take = self.store.claim(
                    want,
                    self.queues,
                    start=start_now,
                    zombie_retry_types=self.zombie_retry_types,
                    skip=list(self.slots.running),
                )
                jobs = await self.reconciler.take(take)
        except Exception as exc:
            # From the busy interval even while LISTEN is up: the idle one (seconds) would stall
            # the worker after one failed claim, though the failure says nothing about new jobs.
            delay = backoff(self._failures, base=self.settings.polling_interval)
            self._failures += 1
            self.outage.failed("claim", exc, delay)
            await self.slots.sleep(delay)
            return None
        self.counts.fetches += 1
        if self.counts.fetches == 1:
            self.activity.touch()  # the first look for work: until_idle counts idleness from here
        self._failures = 0
        self.slots.claimed(len(jobs), want)
        return jobs

    async def _probe(self) -> None:
        """Past the outage budget: one ping, then a backoff wait. A success resumes claiming."""
        try:
            await self.store.ping()
            self.outage.succeeded()
            self._failures = 0
        except Exception as exc:
            delay = backoff(self._failures)
            self._failures += 1
            self.outage.failed("probe", exc, delay)
            await self.slots.sleep(delay)
