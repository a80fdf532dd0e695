"""What happens after a handler fails: retry with backoff, or which DLQ reason."""

from __future__ import annotations

import json
import random
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime

import pydantic

from chokaq.domain.attempts import MAX_DETAILS_CHARS, bounded_text
from chokaq.domain.errors import FatalError, ThrottledError
from chokaq.domain.states import FailureReason
from chokaq.settings import RetrySettings

# Errors that retrying cannot fix: the job goes to the DLQ at once as FatalError.
FATAL_TYPES: tuple[type[BaseException], ...] = (
    FatalError,
    pydantic.ValidationError,
    json.JSONDecodeError,
    NotImplementedError,
)


def backoff_delay(failed_attempt: int, retry: RetrySettings, rng: random.Random | None = None) -> float:
    """Delay before the next run after run number ``failed_attempt`` (1-based) failed.

    min(Base * Mult^(n-1), MaxDelay) + jitter. The original passed the wrong n; this one is tested.
    """
    n = max(1, failed_attempt)
    base = min(retry.base_delay * retry.backoff_multiplier ** (n - 1), retry.max_delay)
    jitter = (rng or random).uniform(0, retry.jitter_max_delay) if retry.jitter_max_delay > 0 else 0.0
    return float(base + jitter)


@dataclass(frozen=True, slots=True)
class Decision:
    retry: bool
    delay: float = 0.0
    reason: FailureReason | None = None


def decide(
    exc: BaseException,
    *,
    attempt: int,
    max_attempts: int,
    created_at_utc: datetime | None,
    retry: RetrySettings,
    now: datetime | None = None,
) -> Decision:
    if isinstance(exc, FATAL_TYPES):
        return Decision(False, reason=FailureReason.FATAL_ERROR)
    out_of_attempts = attempt >= max_attempts
    if isinstance(exc, ThrottledError):
        if out_of_attempts:
            return Decision(False, reason=FailureReason.THROTTLED)
        delay = exc.retry_after
    else:
        if out_of_attempts:
            return Decision(False, reason=FailureReason.MAX_RETRIES_EXCEEDED)
        delay = backoff_delay(attempt, retry)
    if created_at_utc is not None:
        current = now or datetime.now(UTC).replace(tzinfo=None)
        created = created_at_utc.replace(tzinfo=None) if created_at_utc.tzinfo else created_at_utc
        if (current - created).total_seconds() + delay > retry.max_job_age:
            return Decision(False, reason=FailureReason.RETRY_LIFETIME_EXPIRED)
    return Decision(True, delay=delay)


def describe(exc: BaseException) -> str:
    """ErrorDetails text: the message, validation errors one per line, then the traceback."""
    lines = [f"{type(exc).__name__}: {exc}"]
    if isinstance(exc, pydantic.ValidationError):
        lines = [f"{type(exc).__name__}: payload failed validation ({exc.error_count()} errors)"]
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "(root)"
            lines.append(f"  {where}: {err['msg']}")
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return bounded_text("\n".join(lines) + "\n\n" + tb, MAX_DETAILS_CHARS)
