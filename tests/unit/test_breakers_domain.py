"""The breaker's transitions as pure functions, the policies a worker derives from settings and
handlers, and bad settings refused at start-up."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from chokaq import BreakerPolicy, ChokaQ
from chokaq.domain import breakers as b
from chokaq.domain.errors import ConfigurationError
from chokaq.runtime.breakers import policies
from chokaq.settings import CircuitBreakerSettings, load_settings

T0 = datetime(2026, 1, 1)
P = BreakerPolicy(failure_threshold=3, window=10, open_duration=30, half_open_probes=2)


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def test_failures_in_a_window_open_it_and_old_ones_expire() -> None:
    s = b.BreakerState("t")
    s = b.on_failure(s, P, at(0), "w")
    s = b.on_failure(s, P, at(5), "w")
    assert (s.state, s.failure_count) == (b.CLOSED, 2)
    s = b.on_failure(s, P, at(10), "w")  # the window of 10 s from t=0 has ended: counts from 1
    assert (s.state, s.failure_count, s.window_start_utc) == (b.CLOSED, 1, at(10))
    s = b.on_failure(b.on_failure(s, P, at(11), "w"), P, at(12), "w2")
    assert (s.state, s.opened_at_utc, s.open_until_utc, s.updated_by) == (b.OPEN, at(12), at(42), "w2")
    assert b.on_failure(s, P, at(13), "w").state == b.OPEN  # counted while open, still open


def test_probes_after_open_duration_and_their_outcomes() -> None:
    opened = b.on_failure(
        b.BreakerState("t"), BreakerPolicy(failure_threshold=1, open_duration=30, half_open_probes=2), at(0), "w"
    )
    assert b.admit_probes(opened, P, at(29), "w") == (opened, 0)
    half, room = b.admit_probes(opened, P, at(30), "w")
    assert (half.state, room) == (b.HALF_OPEN, 2)
    busy = b.BreakerState("t", state=b.HALF_OPEN, probes_in_flight=2, last_updated_utc=at(30))
    assert b.admit_probes(busy, P, at(31), "w")[1] == 0
    # A round whose probes never reported (their worker died) starts again after OpenDuration.
    assert b.admit_probes(busy, P, at(60), "w")[1] == 2
    assert b.on_failure(half, P, at(31), "w").state == b.OPEN
    closed = b.closed(half, at(31), "w")
    assert (closed.state, closed.failure_count, closed.probes_in_flight) == (b.CLOSED, 0, 0)
    assert b.change_of(half, closed, "w") == b.BreakerChange("t", "half_open", "closed", "w")
    assert b.change_of(closed, closed, "w") is None


@pytest.mark.parametrize(
    "bad", [{"failure_threshold": 0}, {"window": 0}, {"open_duration": -1}, {"half_open_probes": 0}]
)
def test_a_bad_policy_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="breaker"):
        BreakerPolicy(**bad)


@pytest.mark.parametrize(
    ("env", "where"),
    [
        ("CHOKAQ_EXECUTION__CIRCUIT_BREAKER__FAILURE_THRESHOLD", "execution.circuit_breaker.failure_threshold"),
        ("CHOKAQ_EXECUTION__CIRCUIT_BREAKER__HALF_OPEN_PROBES", "execution.circuit_breaker.half_open_probes"),
        ("CHOKAQ_EXECUTION__CIRCUIT_BREAKER__OPEN_DURATION", "execution.circuit_breaker.open_duration"),
    ],
)
def test_bad_settings_refuse_to_start(monkeypatch: pytest.MonkeyPatch, env: str, where: str) -> None:
    monkeypatch.setenv(env, "0")
    with pytest.raises(ConfigurationError, match=where):
        load_settings()


def test_settings_from_the_environment_and_per_handler_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHOKAQ_EXECUTION__CIRCUIT_BREAKER__ENABLED", "true")
    monkeypatch.setenv("CHOKAQ_EXECUTION__CIRCUIT_BREAKER__FAILURE_THRESHOLD", "7")
    cb = load_settings().execution.circuit_breaker
    assert (cb.enabled, cb.failure_threshold, cb.window, cb.open_duration, cb.half_open_probes) == (True, 7, 60, 30, 1)
    app = ChokaQ(storage_url="sqlite://")
    own = BreakerPolicy(failure_threshold=2)

    for name, breaker in (("a", None), ("b", False), ("c", True), ("d", own)):
        app.job(name, breaker=breaker)(lambda payload: None)
    on = policies(app.handlers, cb)
    assert set(on) == {"a", "c", "d"} and on["a"].failure_threshold == 7 and on["d"] is own
    off = policies(app.handlers, CircuitBreakerSettings())
    assert set(off) == {"c", "d"}  # off by default: only the handlers that ask for one
    app.close()
