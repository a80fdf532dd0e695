"""When a job is due: an aware datetime from a producer or an operator, as the naive UTC the
tables hold (``ScheduledAtUtc``).

Only aware datetimes are taken. A naive one is refused rather than read as local time or as UTC:
"08:00" on a host in Paris and the same code on a container in UTC would otherwise run the job an
hour apart, and nothing would say so. The conversion goes through the datetime's own zone, so a
``zoneinfo`` time on a DST change day lands on the right UTC instant (an ambiguous wall time is
resolved by its ``fold``, as Python resolves it).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from chokaq.domain.errors import JobValidationError

# How far ahead a job may be scheduled: as for a delay (EnqueueRequest.delay_seconds).
MAX_AHEAD = timedelta(days=366)


def utc_naive(at: datetime, *, name: str = "at") -> datetime:
    """``at`` as naive UTC; a naive datetime is refused with a clear error."""
    if not isinstance(at, datetime):
        raise JobValidationError(f"{name} must be a datetime, got {type(at).__name__}")
    if at.tzinfo is None or at.utcoffset() is None:
        raise JobValidationError(
            f"{name} must be timezone-aware (e.g. datetime(..., tzinfo=ZoneInfo('Europe/Paris')) "
            f"or an ISO time with an offset such as 2026-12-24T08:00+01:00): a naive time is ambiguous"
        )
    try:
        return at.astimezone(UTC).replace(tzinfo=None)
    except OverflowError:
        raise JobValidationError(f"{name} {at.isoformat()} is out of range") from None


def check_ahead(at_utc: datetime, now_utc: datetime, *, name: str = "at") -> None:
    """Refuse a time further ahead than :data:`MAX_AHEAD` (a typo in the year, most often)."""
    if at_utc - now_utc > MAX_AHEAD:
        raise JobValidationError(f"{name} is more than {MAX_AHEAD.days} days ahead")
