"""A worker's side of the circuit breakers (docs/circuit-breaker.md): which of its job types have
one and with which numbers, the failures and probe successes it reports, the probes it claims,
and the event and metric of every change of state.

Built only when at least one handler has a breaker (:meth:`BreakerGuard.for_handlers`); otherwise
the worker holds None and none of this runs: no statement, no check on the hot path. An ordinary
success never writes: only a probe's success (a job this worker claimed through a half-open
breaker) closes a breaker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from chokaq.domain.breakers import HALF_OPEN, OPEN, BreakerChange, BreakerPolicy
from chokaq.domain.models import JobRecord
from chokaq.domain.states import FailureReason
from chokaq.runtime.events import EventBus
from chokaq.runtime.handlers import Handler
from chokaq.settings import CircuitBreakerSettings
from chokaq.telemetry import instruments

if TYPE_CHECKING:
    from chokaq.runtime.outcomes import Outcome
    from chokaq.storage import BreakerStore, WorkerStore

log = logging.getLogger("chokaq.breaker")

# Failures that say nothing about the type's handler or what it depends on: a job with no
# handler here, an operator's cancel, a worker that lost the database or died.
NOT_COUNTED = frozenset(
    {FailureReason.REJECTED, FailureReason.CANCELLED, FailureReason.HEARTBEAT_FAILURE, FailureReason.ZOMBIE}
)


def policies(handlers: Mapping[str, Handler], settings: CircuitBreakerSettings) -> dict[str, BreakerPolicy]:
    """The job types with a breaker and their numbers (see ``@app.job(..., breaker=...)``)."""
    default = BreakerPolicy(
        failure_threshold=settings.failure_threshold,
        window=settings.window,
        open_duration=settings.open_duration,
        half_open_probes=settings.half_open_probes,
    )
    out: dict[str, BreakerPolicy] = {}
    for name, handler in handlers.items():
        choice = handler.breaker
        if isinstance(choice, BreakerPolicy):
            out[name] = choice
        elif choice is True or (choice is None and settings.enabled):
            out[name] = default
    return out


def announce(events: EventBus | None, change: BreakerChange | None) -> None:
    """The event and the metric of one change of state (workers, the operator's close)."""
    if change is None:
        return
    instruments().breaker_changes.add(1, {"type": change.job_type, "state": change.new})
    log.warning("circuit breaker of %s: %s -> %s (by %s)", change.job_type, change.old, change.new, change.by)
    if events is not None:
        events.publish("breaker.changed", type=change.job_type, old=change.old, new=change.new, by=change.by)


class BreakerGuard:
    def __init__(
        self,
        store: WorkerStore,
        breakers: BreakerStore,
        policies: dict[str, BreakerPolicy],
        *,
        events: EventBus,
        probe_interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.breakers = breakers
        self.policies = policies
        self.events = events
        self.probe_interval = probe_interval
        self._clock = clock
        self._next_look = 0.0
        self.probes: set[str] = set()  # ids of the jobs this worker claimed as probes
        # Types whose breaker this worker last saw open or half-open: their buffered jobs (claimed
        # before it opened) go back to Pending instead of starting (see Starter).
        self.blocked: set[str] = set()

    @classmethod
    def for_handlers(
        cls,
        store: WorkerStore,
        handlers: Mapping[str, Handler],
        settings: CircuitBreakerSettings,
        *,
        events: EventBus,
        probe_interval: float,
    ) -> BreakerGuard | None:
        found = policies(handlers, settings)
        if not found:
            return None
        from chokaq.storage import BreakerStore

        store.skip_open_breakers()
        return cls(store, BreakerStore(store.storage), found, events=events, probe_interval=probe_interval)

    # ------------------------------------------------------------------ outcomes
    async def succeeded(self, outcomes: Sequence[Outcome]) -> None:
        """Recorded successes: a probe's closes its breaker."""
        for o in outcomes:
            if o.record.id in self.probes:
                self.probes.discard(o.record.id)
                await self._report(self.breakers.record_probe_success, o.record.type, self.store.worker_id)

    async def failed(self, o: Outcome) -> None:
        """A recorded retry or move to the DLQ: counted against its type's breaker."""
        self.probes.discard(o.record.id)
        policy = self.policies.get(o.record.type)
        if policy is None or (o.reason is not None and o.reason in NOT_COUNTED):
            return
        await self._report(self.breakers.record_failure, o.record.type, policy, self.store.worker_id)
        self._next_look = 0.0  # look at the states again before the next claim

    def holds(self, job: JobRecord) -> bool:
        """A buffered job that should not start: its type's breaker is not closed, and it is not
        one of this worker's probes."""
        return job.type in self.blocked and job.id not in self.probes

    async def _report(self, fn: Callable[..., BreakerChange | None], *args: object) -> None:
        # Best effort: the outcome itself is written; a breaker that misses one count is harmless,
        # while an error here would make the completer write the outcome again.
        try:
            change = await self.store.call(fn, *args)
        except Exception as exc:
            log.warning("circuit breaker not updated: %s", exc)
            return
        if change is not None:
            if change.new == "closed":
                self.blocked.discard(change.job_type)
            else:
                self.blocked.add(change.job_type)
        announce(self.events, change)

    # ------------------------------------------------------------------ probes
    async def claim_probes(self, queues: Sequence[str] | None) -> list[JobRecord]:
        """At most every ``probe_interval``: the jobs of this worker's types whose breaker lets a
        probe through now, claimed (Fetched) for this worker. One small read when none is open."""
        now = self._clock()
        if now < self._next_look:
            return []
        self._next_look = now + self.probe_interval
        try:
            rows = await self.store.call(self.breakers.not_closed)
            self.blocked = {r.job_type for r in rows if r.job_type in self.policies}
            jobs: list[JobRecord] = []
            for row in rows:
                policy = self.policies.get(row.job_type)
                if policy is None or row.state not in (OPEN, HALF_OPEN):
                    continue
                got, change = await self.store.call(
                    self.breakers.claim_probes, self.store.worker_id, row.job_type, policy, queues
                )
                announce(self.events, change)
                if change is not None and change.new == "closed":
                    self.blocked.discard(row.job_type)
                self.probes.update(j.id for j in got)
                jobs += got
            return jobs
        except Exception as exc:
            log.warning("circuit breaker probes not claimed: %s", exc)
            return []
