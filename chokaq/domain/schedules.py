"""Recurring jobs: what a schedule is, and when its slots fall (pure: no I/O, no database).

Slots are wall-clock times in the schedule's time zone, found by cronsim over naive local times and
turned into UTC with zoneinfo:

- a wall time that does not exist that day (the hour skipped when clocks spring forward) is no
  slot: it is skipped, not moved;
- a wall time that happens twice (the hour repeated when clocks fall back) is one slot, at its
  first occurrence (``fold=0``).

Every stored time is naive UTC, as elsewhere in chokaq.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from chokaq.domain import limits
from chokaq.domain.errors import ConfigurationError
from chokaq.domain.keys import check_key

MissedPolicy = Literal["latest", "skip", "all"]
MISSED_POLICIES: Final[tuple[MissedPolicy, ...]] = ("latest", "skip", "all")
DEFAULT_MISSED_MAX: Final = 10
# How many non-existent wall times in a row may be stepped over before a schedule is called
# impossible (a cron expression that only names skipped hours, say, on one day a year).
_MAX_SKIPS: Final = 10_000
# Catch-up "all" fires at most this many slots in one firing, whatever a schedule asks.
MAX_MISSED_MAX: Final = 1000


class ScheduleError(ConfigurationError):
    """A schedule that must not start: its message names the schedule."""


def zone(name: str, tz: str) -> ZoneInfo:
    """The IANA zone ``tz`` of schedule ``name``."""
    try:
        if not tz or tz != tz.strip() or len(tz) > limits.MAX_TIME_ZONE_LEN:
            raise ValueError
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"schedule {name!r}: unknown time zone {tz!r} (an IANA name, e.g. Europe/Oslo)") from None


def check_cron(name: str, cron: str) -> str:
    """``cron`` as stored (single spaces), or :class:`ScheduleError` naming schedule ``name``.
    Five fields, or six with seconds first."""
    text = " ".join(cron.split())
    if not text or len(text) > limits.MAX_CRON_LEN:
        raise ScheduleError(f"schedule {name!r}: cron expression must be 1..{limits.MAX_CRON_LEN} characters")
    try:
        CronSim(text, datetime(2000, 1, 1))
    except CronSimError as exc:
        raise ScheduleError(f"schedule {name!r}: invalid cron expression {cron!r}: {exc}") from None
    return text


def describe(cron: str) -> str:
    """The expression in words ("At 03:00 every day"), for operators; the expression on failure."""
    try:
        return str(CronSim(cron, datetime(2000, 1, 1)).explain())
    except Exception:  # explain() covers less than the parser; words are a nicety
        return cron


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule declared in code (``app.schedule`` or ``@app.job(..., schedule=)``)."""

    name: str
    cron: str
    job_type: str
    payload: str = "{}"  # JSON text, checked against the handler's model at start-up
    queue: str | None = None  # None: the handler's queue
    tz: str = "UTC"
    priority: int = limits.DEFAULT_PRIORITY
    missed: MissedPolicy = "latest"
    missed_max: int = DEFAULT_MISSED_MAX

    def __post_init__(self) -> None:
        try:
            check_key("schedule", self.name)
        except ValueError as exc:
            raise ScheduleError(f"schedule {self.name!r}: {exc}") from None
        if len(self.name) > limits.MAX_SCHEDULE_NAME_LEN:
            raise ScheduleError(f"schedule {self.name[:60]!r}: name over {limits.MAX_SCHEDULE_NAME_LEN} characters")
        object.__setattr__(self, "cron", check_cron(self.name, self.cron))
        zone(self.name, self.tz)
        if self.missed not in MISSED_POLICIES:
            raise ScheduleError(f"schedule {self.name!r}: missed must be one of {', '.join(MISSED_POLICIES)}")
        if not 1 <= self.missed_max <= MAX_MISSED_MAX:
            raise ScheduleError(f"schedule {self.name!r}: missed_max must be 1..{MAX_MISSED_MAX}")

    def payload_value(self) -> Any:
        return json.loads(self.payload)


def _to_utc(wall: datetime, tz: ZoneInfo) -> datetime | None:
    """The naive-UTC instant of naive wall time ``wall`` in ``tz`` (its first occurrence), or None
    when that wall time does not exist there."""
    aware = wall.replace(tzinfo=tz, fold=0)
    utc = aware.astimezone(UTC)
    if utc.astimezone(tz).replace(tzinfo=None) != wall:
        return None  # skipped by a spring-forward: it maps to another wall time
    return utc.replace(tzinfo=None)


def _wall(utc: datetime, tz: ZoneInfo) -> datetime:
    return utc.replace(tzinfo=UTC).astimezone(tz).replace(tzinfo=None)


def _slots(cron: str, tz: ZoneInfo, start_wall: datetime, *, reverse: bool) -> Iterator[datetime]:
    """Existing slots (naive UTC) from wall time ``start_wall``, forward or backward; cronsim's
    iterator ends (StopIteration) on an expression that never matches."""
    skipped = 0
    for wall in CronSim(cron, start_wall, reverse=reverse):
        utc = _to_utc(wall, tz)
        if utc is None:
            skipped += 1
            if skipped > _MAX_SKIPS:
                return
            continue
        skipped = 0
        yield utc


def next_slot(cron: str, tz: str, after: datetime) -> datetime:
    """The first slot strictly after ``after`` (naive UTC), as naive UTC."""
    zi = ZoneInfo(tz)
    for utc in _slots(cron, zi, _wall(after, zi) - timedelta(seconds=1), reverse=False):
        # A repeated hour's second pass maps wall times back to their first occurrence, which
        # may lie before ``after``: those slots have fired once already.
        if utc > after:
            return utc
    raise ScheduleError(f"cron expression {cron!r} has no slot after {after.isoformat()}")


@dataclass(frozen=True)
class Firing:
    """What one firing does: the slots to enqueue (oldest first), the next due time after them, and
    how many due slots the policy dropped."""

    slots: list[datetime]
    next_due: datetime
    dropped: int


def plan_firing(
    cron: str,
    tz: str,
    due: datetime,
    now: datetime,
    missed: MissedPolicy,
    missed_max: int,
    grace: float,
) -> Firing:
    """Which slots fire now for a schedule whose next slot is ``due`` (naive UTC; nothing fires
    before ``now`` reaches it).

    A slot at most ``grace`` seconds old (Schedules.MissedGrace) is on time and fires, however late
    the firing process came round. An older one was missed (everything was down), and the policy
    decides: ``latest`` (the default) fires the newest missed slot once, unless an on-time slot
    fires anyway; ``skip`` fires none; ``all`` fires the newest ``missed_max`` of them. The next due
    time is the first slot after ``now`` in every case, so missed slots never pile up again.
    """
    if due > now:
        return Firing([], due, 0)
    following = next_slot(cron, tz, now)
    on_time, late, older = _due_newest_first(cron, tz, due, now, grace, missed_max if missed == "all" else 1)
    if missed == "skip" or (missed == "latest" and on_time):
        fired, dropped = on_time, len(late) + older
    else:
        fired, dropped = on_time + late, older
    return Firing(sorted(fired), following, dropped)


# Counting dropped slots stops here: the figure is for a log line, and a per-second schedule that
# was down for a week has 600,000 of them. On-time slots are capped the same way.
_COUNT_LIMIT: Final = 10_000


def _due_newest_first(
    cron: str, tz: str, due: datetime, now: datetime, grace: float, n: int
) -> tuple[list[datetime], list[datetime], int]:
    """The slots in ``[due, now]``: those at most ``grace`` seconds old, the newest ``n`` older
    ones, and how many older ones remain (counted up to a limit)."""
    zi = ZoneInfo(tz)
    on_time: list[datetime] = []
    late: list[datetime] = []
    older = 0
    for utc in _slots(cron, zi, _walk_start(now, zi), reverse=True):
        if utc > now:
            continue
        if utc < due or len(on_time) >= _COUNT_LIMIT or older >= _COUNT_LIMIT:
            break
        if (now - utc).total_seconds() <= grace:
            on_time.append(utc)
        elif len(late) < n:
            late.append(utc)
        else:
            older += 1
    return on_time, late, older


def _walk_start(now: datetime, tz: ZoneInfo) -> datetime:
    """The wall time a backward walk over the slots up to ``now`` (naive UTC) starts from.

    In the second pass of a repeated hour the wall clock has gone back: slots of the first pass
    (their first occurrence, which is when they fire) carry wall times later than now's. The walk
    then starts from the end of the repeated hour, and the slots after ``now`` are passed over."""
    local = now.replace(tzinfo=UTC).astimezone(tz)
    start = local.replace(tzinfo=None) + timedelta(seconds=1)
    if local.fold:
        first_pass = local.replace(fold=0).utcoffset() or timedelta(0)
        start += first_pass - (local.utcoffset() or timedelta(0))
    return start


def slot_key(name: str, slot: datetime) -> str:
    """The idempotency key of schedule ``name``'s job for ``slot`` (naive UTC)."""
    return f"schedule:{name}@{slot.strftime('%Y-%m-%dT%H:%M:%S')}Z"


@dataclass(frozen=True)
class ScheduleInfo:
    """A schedule as stored (the Schedules row)."""

    name: str
    job_type: str
    queue: str
    payload: str
    priority: int
    cron: str
    time_zone: str
    missed_policy: str
    missed_max: int
    next_due_utc: datetime
    last_slot_utc: datetime | None
    last_fired_utc: datetime | None
    last_job_id: str | None
    is_paused: bool
    is_orphaned: bool
    created_at_utc: datetime | None
    created_by: str | None
    last_updated_utc: datetime | None
    last_modified_by: str | None


@dataclass(frozen=True)
class Fired:
    """One firing: schedule ``name`` enqueued ``job_ids`` for ``slots``, ``lag`` seconds after the
    newest slot (database clock); ``dropped``: due slots its missed-slot policy did not fire."""

    name: str
    slots: list[datetime]
    job_ids: list[str]
    next_due: datetime
    dropped: int
    lag: float
