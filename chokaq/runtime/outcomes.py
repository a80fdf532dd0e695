"""What a job's run came to, decided from how it ended: pure functions beside policy.py (which
decides retry against DLQ for a failure). The worker records the result; nothing here touches the
database, logs or counts."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from chokaq.domain.attempts import DEAD_LETTERED, RETRIED, ErrorParts, appended, failed_attempt
from chokaq.domain.job_logs import JobNotes, Notes
from chokaq.domain.models import JobRecord, Lease
from chokaq.domain.states import FailureReason
from chokaq.runtime.handlers import (
    CANCEL_HEARTBEAT,
    CANCEL_LOST,
    CANCEL_OPERATOR,
    CANCEL_SHUTDOWN,
    CANCEL_TIMEOUT,
    CancelReason,
)
from chokaq.runtime.policy import decide, describe
from chokaq.settings import RetrySettings

__all__ = [
    "CANCEL_HEARTBEAT",
    "CANCEL_LOST",
    "CANCEL_OPERATOR",
    "CANCEL_SHUTDOWN",
    "CANCEL_TIMEOUT",
    "CancelReason",
    "Outcome",
    "OutcomeKind",
    "cancelled",
    "failed",
    "rejected",
    "succeeded",
]

# What the completer does with a run: record a success, move the job to the DLQ (fail), give it
# another attempt later (retry), hand it back to Pending unrun (reschedule), or write nothing
# (drop: the job was taken from us, or is left to the sweep).
OutcomeKind = Literal["success", "fail", "retry", "reschedule", "drop"]


@dataclass
class Outcome:
    kind: OutcomeKind
    lease: Lease
    record: JobRecord
    duration_ms: int = 0
    reason: FailureReason | None = None
    details: str | None = None
    delay: float = 0.0
    error: ErrorParts | None = None  # why the attempt failed, for its entry in the job's history
    ended: float = 0.0  # when the handler ended (epoch seconds)
    notes: JobNotes | None = None  # the handler's log lines and progress (None: it said nothing)

    def unwritten_notes(self) -> Notes | None:
        """The logs and progress the job's row lacks (None: it has them all): written by the
        statement that ends the attempt."""
        if self.notes is None:
            return None
        logs, progress, _ = self.notes.unwritten()
        return Notes(logs, progress) if logs is not None or progress is not None else None

    def history(self) -> str:
        """The job's attempt history with this (failed) attempt added: written by the statement
        that retries the job or moves it to the DLQ."""
        entry = failed_attempt(
            attempt=self.lease.attempt,
            outcome=RETRIED if self.kind == "retry" else DEAD_LETTERED,
            worker=self.lease.worker_id,
            ended=datetime.fromtimestamp(self.ended or time.time(), UTC),
            duration_ms=self.duration_ms,
            reason=self.reason.label if self.reason is not None else None,
            error=self.error,
        )
        return appended(self.record.attempts, entry)


def succeeded(record: JobRecord, lease: Lease) -> Outcome:
    return Outcome("success", lease, record)


def rejected(record: JobRecord, lease: Lease, details: str) -> Outcome:
    """The worker would not run it (no handler for its type): straight to the DLQ."""
    return Outcome(
        "fail", lease, record, reason=FailureReason.REJECTED, details=details, error=ErrorParts("Rejected", details)
    )


def cancelled(
    record: JobRecord,
    lease: Lease,
    cancel_reason: CancelReason | None,
    *,
    thread_still_running: bool,
    heartbeat_failures: int,
    timeout: float,
) -> Outcome:
    """A job the worker stopped (``cancel_reason``), whatever it raised on the way out.

    Shutdown gives the job back (reschedule) unless its handler thread runs on: then it may still
    have effects, so it is left Processing for zombie rescue (drop) rather than run twice. Lost
    ownership: someone else holds it now (drop). Cancelled by an operator: the job is in the DLQ
    already, moved there by the cancel itself (drop). A run past ``timeout`` (the reason None or
    CANCEL_TIMEOUT) and a heartbeat that kept failing are failures that go to the DLQ."""
    if cancel_reason == CANCEL_SHUTDOWN:
        return Outcome("drop" if thread_still_running else "reschedule", lease, record)
    if cancel_reason == CANCEL_HEARTBEAT:
        details = f"cancelled after {heartbeat_failures} consecutive heartbeat write failures"
        return Outcome(
            "fail",
            lease,
            record,
            reason=FailureReason.HEARTBEAT_FAILURE,
            details=details,
            error=ErrorParts("HeartbeatFailure", details),
        )
    if cancel_reason in (CANCEL_LOST, CANCEL_OPERATOR):
        return Outcome("drop", lease, record)
    details = f"execution exceeded the timeout of {timeout:g}s"
    return Outcome(
        "fail", lease, record, reason=FailureReason.TIMEOUT, details=details, error=ErrorParts("Timeout", details)
    )


def failed(
    record: JobRecord,
    lease: Lease,
    exc: BaseException,
    *,
    max_attempts: int,
    retry: RetrySettings,
) -> Outcome:
    """A handler that raised on its own: another attempt later (retry) or the DLQ (fail), as the
    retry policy decides."""
    d = decide(
        exc,
        attempt=record.attempt_count,
        max_attempts=max_attempts,
        created_at_utc=record.created_at_utc,
        retry=retry,
    )
    error = ErrorParts.of(exc)
    if d.retry:
        return Outcome("retry", lease, record, delay=d.delay, error=error)
    return Outcome("fail", lease, record, reason=d.reason, details=describe(exc), error=error)
