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
    failure is logged and the next poll tries again; it never stops the worker."""
    while True:
        try:
            await asyncio.to_thread(fire_due, storage, settings)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if is_transient(exc):
                log.info(
                    "schedules: database unavailable (%s); next try in %gs",
                    type(exc).__name__,
                    settings.schedules.poll_interval,
                )
            else:
                log.exception("schedules: firing failed")
        await asyncio.sleep(settings.schedules.poll_interval)
