from __future__ import annotations

import random
from datetime import datetime, timedelta

import pydantic
import pytest

from chokaq.domain.errors import FatalError, ThrottledError
from chokaq.domain.states import FailureReason
from chokaq.runtime.policy import backoff_delay, decide, describe
from chokaq.settings import RetrySettings

NO_JITTER = RetrySettings(jitter_max_delay=0)


@pytest.mark.parametrize("attempt, expected", [(1, 3.0), (2, 6.0), (3, 12.0), (4, 24.0), (20, 3600.0)])
def test_backoff_uses_the_failed_attempt_number(attempt: int, expected: float) -> None:
    assert backoff_delay(attempt, NO_JITTER) == expected


def test_jitter_is_bounded() -> None:
    rng = random.Random(7)
    delays = [backoff_delay(1, RetrySettings(jitter_max_delay=1.0), rng) for _ in range(200)]
    assert all(3.0 <= d <= 4.0 for d in delays)
    assert max(delays) - min(delays) > 0.5


def now() -> datetime:
    return datetime(2026, 1, 1, 12, 0, 0)


def test_fatal_errors_skip_retries() -> None:
    class M(pydantic.BaseModel):
        x: int

    try:
        M.model_validate({"x": "nope"})
    except pydantic.ValidationError as exc:
        validation = exc
    for exc in (FatalError("bad"), validation, NotImplementedError()):
        d = decide(exc, attempt=1, max_attempts=3, created_at_utc=now(), retry=NO_JITTER, now=now())
        assert not d.retry and d.reason == FailureReason.FATAL_ERROR


def test_retry_then_max_retries_exceeded() -> None:
    d1 = decide(RuntimeError(), attempt=1, max_attempts=3, created_at_utc=now(), retry=NO_JITTER, now=now())
    assert d1.retry and d1.delay == 3.0
    d3 = decide(RuntimeError(), attempt=3, max_attempts=3, created_at_utc=now(), retry=NO_JITTER, now=now())
    assert not d3.retry and d3.reason == FailureReason.MAX_RETRIES_EXCEEDED


def test_throttled_uses_retry_after() -> None:
    d = decide(
        ThrottledError(retry_after=42), attempt=1, max_attempts=3, created_at_utc=now(), retry=NO_JITTER, now=now()
    )
    assert d.retry and d.delay == 42
    last = decide(
        ThrottledError(retry_after=42), attempt=3, max_attempts=3, created_at_utc=now(), retry=NO_JITTER, now=now()
    )
    assert last.reason == FailureReason.THROTTLED


def test_max_job_age_ends_retries() -> None:
    old = now() - timedelta(days=1)
    d = decide(RuntimeError(), attempt=1, max_attempts=3, created_at_utc=old, retry=NO_JITTER, now=now())
    assert not d.retry and d.reason == FailureReason.RETRY_LIFETIME_EXPIRED


def test_describe_lists_validation_errors_and_traceback() -> None:
    class Email(pydantic.BaseModel):
        to: str
        subject: str

    try:
        Email.model_validate({"to": "x"})
    except pydantic.ValidationError as exc:
        text = describe(exc)
    assert "subject: Field required" in text
    assert "Traceback" in text
