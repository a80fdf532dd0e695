"""Firing due schedules, from whichever process comes round: a worker (a helper task), the sweep
loop, the Functions sweep timer. No leader: the firing transaction makes each slot fire once
(storage/schedules.py)."""

from __future__ import annotations

import asyncio
import logging

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
        fired = store.fire(name, grace=settings.schedules.missed_grace)
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
