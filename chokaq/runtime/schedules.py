"""Firing due schedules, from whichever process comes round: a worker (a helper task), the sweep
loop, the Functions sweep timer. No leader: the firing transaction makes each slot fire once
(storage/schedules.py)."""

from __future__ import annotations

import asyncio
import logging
import weakref

from chokaq.domain.schedules import Fired
from chokaq.settings import ChokaQSettings
from chokaq.storage import ScheduleStore, Storage, is_transient
from chokaq.telemetry import instruments

log = logging.getLogger("chokaq.schedules")


def fire_due(storage: Storage, settings: ChokaQSettings) -> list[Fired]:
    """Fire every schedule due now, one transaction each; what this process fired."""
    store = ScheduleStore(storage)
    out: list[Fired] = []
    for name in store.due():
        try:
            fired = store.fire(name, grace=settings.schedules.missed_grace)
        except Exception as exc:
            if is_transient(exc):
                raise  # the database is away: the caller backs off, for every schedule alike
            # One schedule this process cannot fire (a zone or expression its tzdata or cron
            # library does not know, during a rolling deploy, say) must not hold up the others.
            _report_once(storage, name, exc)
            continue
        _failing.get(storage, {}).pop(name, None)
        if fired is None:
            continue
        out.append(fired)
        ins = instruments()
        if fired.job_ids:
            ins.schedules_fired.add(len(fired.job_ids), {"schedule": name})
            ins.schedule_lag.record(fired.lag * 1000.0, {"schedule": name})
        if fired.dropped:
            log.warning(
                "schedule %s: %d missed %s not fired (its missed-slot policy); next at %sZ",
                name,
                fired.dropped,
                "slot" if fired.dropped == 1 else "slots",
                fired.next_due.isoformat(),
            )
    return out


# Per storage, what each schedule this process could not fire failed with, so that a failure
# repeated every Schedules.PollInterval is logged once (and again once it changes).
_failing: weakref.WeakKeyDictionary[Storage, dict[str, str]] = weakref.WeakKeyDictionary()


def _report_once(storage: Storage, name: str, exc: Exception) -> None:
    what = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
    seen = _failing.setdefault(storage, {})
    if seen.get(name) != what:
        seen[name] = what
        log.error("schedule %s cannot be fired here (%s); the other schedules go on", name, what)


async def fire_forever(storage: Storage, settings: ChokaQSettings) -> None:
    """A worker's helper: fire due schedules every Schedules.PollInterval until cancelled. A
    failure is logged (once while it repeats) and the next poll tries again; it never stops the
    worker."""
    failing: str | None = None
    while True:
        try:
            await asyncio.to_thread(fire_due, storage, settings)
            failing = None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            what = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
            if what != failing:
                failing = what
                level = logging.INFO if is_transient(exc) else logging.ERROR
                log.log(
                    level,
                    "schedules: firing failed (%s); trying again every %gs",
                    what,
                    settings.schedules.poll_interval,
                )
        await asyncio.sleep(settings.schedules.poll_interval)
