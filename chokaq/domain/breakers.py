"""Circuit breakers per job type (Execution.CircuitBreaker, docs/circuit-breaker.md): the states,
a policy, and the transitions as pure functions. The storage applies them to the locked
CircuitBreakers row, so every worker sees one state per type.

closed: jobs are claimed; failures are counted in a window of ``window`` seconds, and
``failure_threshold`` of them open the breaker. open: the claim skips the type (its jobs wait
Pending, no attempt spent) until ``open_duration`` has passed. half_open: up to
``half_open_probes`` jobs are let through; a probe's success closes the breaker, any failure opens
it again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

CLOSED = 0
OPEN = 1
HALF_OPEN = 2
BreakerStateName = Literal["closed", "open", "half_open"]
STATE_NAMES: dict[int, BreakerStateName] = {CLOSED: "closed", OPEN: "open", HALF_OPEN: "half_open"}


@dataclass(frozen=True)
class BreakerPolicy:
    """One job type's breaker: the numbers of Execution.CircuitBreaker, or a handler's own
    (``@app.job(..., breaker=BreakerPolicy(...))``)."""

    failure_threshold: int = 5
    window: float = 60.0
    open_duration: float = 30.0
    half_open_probes: int = 1

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise ValueError("breaker failure_threshold must be at least 1")
        if self.window <= 0 or self.open_duration <= 0:
            raise ValueError("breaker window and open_duration must be positive seconds")
        if self.half_open_probes < 1:
            raise ValueError("breaker half_open_probes must be at least 1")


@dataclass(frozen=True)
class BreakerState:
    """A CircuitBreakers row."""

    job_type: str
    state: int = CLOSED
    failure_count: int = 0
    window_start_utc: datetime | None = None
    opened_at_utc: datetime | None = None
    open_until_utc: datetime | None = None
    probes_in_flight: int = 0
    updated_by: str | None = None
    last_updated_utc: datetime | None = None

    @property
    def state_name(self) -> BreakerStateName:
        return STATE_NAMES.get(self.state, "open")


@dataclass(frozen=True)
class BreakerChange:
    """A change of state, announced by an event and counted by the metric."""

    job_type: str
    old: BreakerStateName
    new: BreakerStateName
    by: str


def _open(s: BreakerState, policy: BreakerPolicy, now: datetime, by: str) -> BreakerState:
    return replace(
        s,
        state=OPEN,
        opened_at_utc=now,
        open_until_utc=now + timedelta(seconds=policy.open_duration),
        probes_in_flight=0,
        updated_by=by,
        last_updated_utc=now,
    )


def on_failure(s: BreakerState, policy: BreakerPolicy, now: datetime, by: str) -> BreakerState:
    """A failed attempt of the type. Closed: counted in the window, opening at the threshold.
    Half-open: a failed probe (or any failure then) opens it again. Open: counted only."""
    if s.state == HALF_OPEN:
        return _open(replace(s, failure_count=s.failure_count + 1), policy, now, by)
    if s.state == OPEN:
        return replace(s, failure_count=s.failure_count + 1, last_updated_utc=now)
    fresh = s.window_start_utc is None or now - s.window_start_utc >= timedelta(seconds=policy.window)
    count = 1 if fresh else s.failure_count + 1
    counted = replace(s, failure_count=count, window_start_utc=now if fresh else s.window_start_utc)
    if count >= policy.failure_threshold:
        return _open(counted, policy, now, by)
    return replace(counted, last_updated_utc=now)


def closed(s: BreakerState, now: datetime, by: str) -> BreakerState:
    """A probe succeeded, or an operator closed it: the count starts again."""
    return replace(
        s,
        state=CLOSED,
        failure_count=0,
        window_start_utc=None,
        opened_at_utc=None,
        open_until_utc=None,
        probes_in_flight=0,
        updated_by=by,
        last_updated_utc=now,
    )


def admit_probes(s: BreakerState, policy: BreakerPolicy, now: datetime, by: str) -> tuple[BreakerState, int]:
    """How many probes may be claimed now, and the state that records them.

    Open past ``open_until``: half-open, with all its probes free. Half-open: the probes not in
    flight. A half-open round older than ``open_duration`` whose probes never reported (their
    worker died) starts again, so a lost probe cannot hold the breaker half-open for ever."""
    if s.state == OPEN and s.open_until_utc is not None and now >= s.open_until_utc:
        s = replace(s, state=HALF_OPEN, probes_in_flight=0, updated_by=by, last_updated_utc=now)
    elif (
        s.state == HALF_OPEN
        and s.last_updated_utc is not None
        and now - s.last_updated_utc >= timedelta(seconds=policy.open_duration)
    ):
        s = replace(s, probes_in_flight=0, last_updated_utc=now)
    if s.state != HALF_OPEN:
        return s, 0
    return s, max(0, policy.half_open_probes - s.probes_in_flight)


def change_of(old: BreakerState | None, new: BreakerState, by: str) -> BreakerChange | None:
    before = old.state_name if old is not None else "closed"
    if before == new.state_name:
        return None
    return BreakerChange(new.job_type, before, new.state_name, by)
