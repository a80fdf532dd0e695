"""The recovery sweep: abandoned reservations back to Pending, expired heartbeats to the DLQ."""

from __future__ import annotations

import logging
import threading

from chokaq.domain.models import SweepResult
from chokaq.runtime.events import bus
from chokaq.settings import ChokaQSettings
from chokaq.storage import Storage
from chokaq.telemetry import instruments, tracer

log = logging.getLogger("chokaq.sweep")


def run_sweep(storage: Storage, settings: ChokaQSettings) -> SweepResult:
    """One sweep. Needs only the database: no worker has to be alive."""
    with tracer().start_as_current_span("chokaq.sweep") as span:
        result = storage.sweep(
            fetched_timeout=settings.recovery.fetched_job_timeout,
            zombie_timeout=settings.recovery.processing_zombie_timeout,
            max_attempts=settings.retry.max_attempts,
        )
        span.set_attribute("chokaq.recovered", result.recovered)
        span.set_attribute("chokaq.archived", result.archived)
    ins = instruments()
    ins.sweeps.add(1)
    if result.archived:
        ins.dlq.add(result.archived, {"reason": "Zombie"})
    if result.retried_zombies:
        ins.retried.add(result.retried_zombies, {"reason": "Zombie"})
    if result.recovered or result.archived or result.retried_zombies:
        log.warning(
            "ZombieRescue: recovered %d abandoned, archived %d zombies, retried %d idempotent zombies",
            result.recovered,
            result.archived,
            result.retried_zombies,
        )
        bus.publish(
            "zombie.rescue",
            recovered=result.recovered,
            archived=result.archived,
            retried=result.retried_zombies,
            ids=result.zombie_ids[:50],
        )
    return result


def sweep_forever(storage: Storage, settings: ChokaQSettings, stop: threading.Event) -> None:
    """Sweep every Recovery.ScanInterval until ``stop``; a failed sweep is logged, never fatal."""
    while not stop.is_set():
        try:
            run_sweep(storage, settings)
        except Exception:
            log.exception("ZombieRescue sweep failed")
        stop.wait(settings.recovery.scan_interval)
