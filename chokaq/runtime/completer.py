"""Writes a worker's outcomes to the database in batches: all waiting successes in one statement,
then each failure, retry and reschedule.

An outcome stays held (the worker keeps its job in ``running``, heartbeated) until the database
has it. A transient error (see ``chokaq.storage.is_transient``) is retried after ``backoff(n)``,
however long the outage lasts, so the sweep never buries work that is done; a replay that finds
its own earlier success counts as one (see Storage.complete and friends). A non-transient error
cannot be helped by retrying: that outcome is abandoned to the sweep and the rest go on.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from chokaq.domain.backoff import backoff
from chokaq.domain.job_logs import Notes
from chokaq.domain.models import Lease
from chokaq.domain.states import FailureReason
from chokaq.runtime.breakers import BreakerGuard
from chokaq.runtime.changes import Changes
from chokaq.runtime.events import EventBus
from chokaq.runtime.outage import Outage
from chokaq.runtime.outcomes import Outcome
from chokaq.runtime.worker_stats import Transition, WorkerStats
from chokaq.storage import Completion, DeadLetter, is_transient
from chokaq.telemetry import instruments

log = logging.getLogger("chokaq.worker")


class Finishing(Protocol):
    """Where outcomes are written (the worker's :class:`~chokaq.storage.WorkerStore`)."""

    async def complete(self, done: Sequence[Completion]) -> set[str]: ...
    async def fail(
        self, lease: Lease, reason: FailureReason, details: str | None, attempts: str, notes: Notes | None = None
    ) -> bool: ...
    async def fail_many(self, fails: Sequence[DeadLetter]) -> set[str]: ...
    async def retry(self, lease: Lease, delay: float, attempts: str, notes: Notes | None = None) -> bool: ...
    async def reschedule(self, leases: Sequence[Lease]) -> list[str]: ...


class Owner(Protocol):
    """Who holds the outcomes' jobs until they are written (the
    :class:`~chokaq.runtime.worker.Worker`)."""

    def recorded(self, finished: list[Outcome]) -> None:
        """The database has these outcomes: their jobs are no longer held."""
        ...

    def abandoned(self, finished: list[Outcome]) -> None:
        """These outcomes are left to the sweep (an error retrying cannot help)."""
        ...

    def conflict(self, transition: Transition, n: int = 1) -> None:
        """Count ``n`` moves that found the job no longer ours."""
        ...


class Completer:
    def __init__(
        self,
        store: Finishing,
        owner: Owner,
        outage: Outage,
        counts: WorkerStats,
        *,
        retry_delay: Callable[[int], float] = backoff,
        retryable: Callable[[BaseException], bool] = is_transient,
        events: EventBus | None = None,
        breakers: BreakerGuard | None = None,
    ) -> None:
        """``retry_delay(attempt)`` and ``retryable(exc)`` are the retry policy. ``events`` is the
        app's bus that hears of each recorded outcome (``None``: nobody in this process listens)."""
        self.store = store
        self.owner = owner
        self.outage = outage
        self.counts = counts
        self._retry_delay = retry_delay
        self._retryable = retryable
        self._events = events if events is not None else EventBus()
        # The worker's circuit breakers; None (the default, and whenever none is on) costs nothing.
        self._breakers = breakers
        # Outcomes not yet taken for writing: a plain list, handed over whole (cheaper per job
        # than an asyncio.Queue's put and get).
        self._pending: list[Outcome] = []
        self._arrived = Changes()

    def put(self, outcome: Outcome) -> None:
        self._pending.append(outcome)
        self._arrived.notify()

    async def run(self) -> None:
        """Take every outcome waiting, record them as one batch, repeat."""
        while True:
            await self._arrived.until(lambda: bool(self._pending))
            batch, self._pending = self._pending, []
            await self.record(batch)

    async def record(self, batch: list[Outcome]) -> None:
        successes = [o for o in batch if o.kind == "success"]
        # The batch's failures go to the DLQ in one transaction, with one event feed row per reason.
        fails = [o for o in batch if o.kind == "fail"]
        others = [o for o in batch if o.kind not in ("success", "fail")]
        attempt = 0
        while successes or fails or others:
            try:
                if successes:
                    await self._record_successes(successes)
                    self.owner.recorded(successes)
                    successes = []
                if fails:
                    await self._record_fails(fails)
                    self.owner.recorded(fails)
                    fails = []
                while others:
                    await self._record_one(others[0])
                    self.owner.recorded(others[:1])
                    others.pop(0)
                self.outage.succeeded()
            except Exception as exc:
                if not self._retryable(exc):
                    # A bug or a refused statement: retrying cannot help. The sweep recovers the job.
                    failed = successes or fails or others[:1]
                    log.exception("finalising %d outcome(s) failed; the sweep will recover them", len(failed))
                    self.owner.abandoned(failed)
                    if successes:
                        successes = []
                    elif fails:
                        fails = []
                    else:
                        others.pop(0)
                    continue
                delay = self._retry_delay(attempt)
                attempt += 1
                self.outage.failed("finalise", exc, delay)
                await asyncio.sleep(delay)

    async def _record_successes(self, successes: list[Outcome]) -> None:
        ins = instruments()
        completions = [Completion(o.lease, o.duration_ms, o.unwritten_notes()) for o in successes]
        done = await self.store.complete(completions)
        archived: Counter[tuple[str, str]] = Counter()
        archived_events: list[dict[str, Any]] = []  # the bus's event data (id, queue, type)
        for o in successes:
            if o.record.id in done:
                archived[(o.record.queue, o.record.type)] += 1
                archived_events.append({"id": o.record.id, "queue": o.record.queue, "type": o.record.type})
        self._events.publish_many("job.archived", archived_events)  # one hand-off, one event per job
        for (queue, type_), n in archived.items():
            ins.completed.add(n, {"queue": queue, "type": type_})
        self.counts.succeeded += len(done)
        self.owner.conflict("complete", len(successes) - len(done))
        if self._breakers is not None and self._breakers.probes:
            await self._breakers.succeeded([o for o in successes if o.record.id in done])

    async def _record_fails(self, fails: list[Outcome]) -> None:
        ins = instruments()
        letters = []
        for o in fails:
            assert o.reason is not None
            letters.append(
                DeadLetter(o.lease, o.reason, o.details, o.history(), o.unwritten_notes(), queue=o.record.queue)
            )
        moved = await self.store.fail_many(letters)
        for o in fails:
            assert o.reason is not None
            if o.record.id not in moved:
                self.owner.conflict("fail", 1)
                continue
            self.counts.failed += 1
            ins.dlq.add(1, {"queue": o.record.queue, "type": o.record.type, "reason": o.reason.label})
            self._events.publish("job.failed", id=o.record.id, queue=o.record.queue, reason=o.reason.label)
            if self._breakers is not None:
                await self._breakers.failed(o)

    async def _record_one(self, o: Outcome) -> None:
        ins = instruments()
        attrs = {"queue": o.record.queue, "type": o.record.type}
        if o.kind == "retry":
            ok = await self.store.retry(o.lease, o.delay, o.history(), o.unwritten_notes())
            if ok:
                self.counts.retried += 1
                ins.retried.add(1, {**attrs, "attempt": o.record.attempt_count})
                self._events.publish("job.updated", id=o.record.id, queue=o.record.queue, status="Pending")
                if self._breakers is not None:
                    await self._breakers.failed(o)
            else:
                self.owner.conflict("retry", 1)
        elif o.kind == "reschedule":
            moved = await self.store.reschedule([o.lease])
            if not moved:
                self.owner.conflict("reschedule", 1)
        # "drop": the job was taken from us; nothing to write.
