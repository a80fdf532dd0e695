"""Outcome classification (runtime/outcomes.py): how a run's ending becomes what the worker records."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from chokaq.domain.errors import FatalError
from chokaq.domain.models import JobRecord, Lease
from chokaq.domain.states import FailureReason, JobStatus, Location
from chokaq.runtime import outcomes
from chokaq.settings import RetrySettings

LEASE = Lease("j1", "w1", 1)
RETRY = RetrySettings(base_delay=2.0, jitter_max_delay=0, max_delay=60)


def record(attempt: int = 1) -> JobRecord:
    return JobRecord(
        id="j1",
        location=Location.HOT,
        queue="q",
        type="t",
        payload="{}",
        tags=None,
        attempt_count=attempt,
        worker_id="w1",
        created_by=None,
        last_modified_by=None,
        created_at_utc=datetime.now(UTC).replace(tzinfo=None),
        status=JobStatus.PROCESSING,
    )


def cancelled(reason: str | None, *, thread: bool = False) -> outcomes.Outcome:
    return outcomes.cancelled(record(), LEASE, reason, thread_still_running=thread, heartbeat_failures=4, timeout=1.5)


def test_shutdown_gives_the_job_back_unless_its_thread_runs_on() -> None:
    assert cancelled(outcomes.CANCEL_SHUTDOWN).kind == "reschedule"
    assert cancelled(outcomes.CANCEL_SHUTDOWN, thread=True).kind == "drop"  # may still have effects


def test_lost_ownership_writes_nothing() -> None:
    assert cancelled(outcomes.CANCEL_LOST, thread=True).kind == "drop"
    assert cancelled(outcomes.CANCEL_LOST).kind == "drop"


@pytest.mark.parametrize("reason", [outcomes.CANCEL_TIMEOUT, None])
def test_a_timeout_is_a_failure_naming_the_limit(reason: str | None) -> None:
    o = cancelled(reason)
    assert (o.kind, o.reason, o.details) == ("fail", FailureReason.TIMEOUT, "execution exceeded the timeout of 1.5s")


def test_a_failing_heartbeat_is_a_failure_naming_the_count() -> None:
    o = cancelled(outcomes.CANCEL_HEARTBEAT)
    assert (o.kind, o.reason) == ("fail", FailureReason.HEARTBEAT_FAILURE)
    assert o.details == "cancelled after 4 consecutive heartbeat write failures"


def test_failures_retry_until_the_last_attempt_then_go_to_the_dlq() -> None:
    first = outcomes.failed(record(1), LEASE, ValueError("boom"), max_attempts=3, retry=RETRY)
    assert (first.kind, first.delay) == ("retry", 2.0)
    last = outcomes.failed(record(3), LEASE, ValueError("boom"), max_attempts=3, retry=RETRY)
    assert (last.kind, last.reason) == ("fail", FailureReason.MAX_RETRIES_EXCEEDED)
    assert last.details is not None and "boom" in last.details


def test_a_fatal_error_skips_the_retries() -> None:
    o = outcomes.failed(record(1), LEASE, FatalError("no"), max_attempts=5, retry=RETRY)
    assert (o.kind, o.reason) == ("fail", FailureReason.FATAL_ERROR)


def test_success_and_rejection() -> None:
    assert outcomes.succeeded(record(), LEASE).kind == "success"
    o = outcomes.rejected(record(), LEASE, "no handler")
    assert (o.kind, o.reason, o.details) == ("fail", FailureReason.REJECTED, "no handler")


def test_an_operators_cancel_writes_nothing_the_cancel_moved_the_job_already() -> None:
    assert cancelled(outcomes.CANCEL_OPERATOR).kind == "drop"
    assert cancelled(outcomes.CANCEL_OPERATOR, thread=True).kind == "drop"
