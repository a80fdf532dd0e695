"""The recovery sweep: abandoned reservations back to Pending, expired heartbeats to the DLQ."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Mapping

from chokaq.domain.backoff import backoff
from chokaq.domain.models import SweepResult
from chokaq.redact import redact
from chokaq.runtime.events import EventBus
from chokaq.runtime.handlers import Handler
from chokaq.runtime.outage import Outage
from chokaq.settings import ChokaQSettings
from chokaq.storage import Storage, WorkerDirectory, is_transient, purge_events, require_current
from chokaq.telemetry import instruments, tracer

log = logging.getLogger("chokaq.sweep")


def run_sweep(
    storage: Storage,
    settings: ChokaQSettings,
    *,
    events: EventBus | None = None,
    breakers: bool = False,
    handlers: Mapping[str, Handler] | None = None,
) -> SweepResult:
    """One sweep. Needs only the database: no worker has to be alive. A rescue is announced on
    ``events`` (the app's bus), when the caller has one whose subscribers should hear of it.
    ``handlers``: the loaded handlers, whose ``verify`` judges the zombies buried (runtime/verify.py).

    With Execution.CircuitBreaker.Enabled (or ``breakers``: the caller's handlers have their own),
    Pending jobs that waited past Retry.MaxJobAge behind an open breaker go to the DLQ as
    CircuitBreakerOpen; otherwise the sweep sends no statement for breakers."""
    require_current(storage)  # a rescue on an older schema would fail half-way (schema_check.py)
    with tracer().start_as_current_span("chokaq.sweep") as span:
        result = storage.sweep(
            fetched_timeout=settings.recovery.fetched_job_timeout,
            zombie_timeout=settings.recovery.processing_zombie_timeout,
            max_attempts=settings.retry.max_attempts,
        )
        span.set_attribute("chokaq.recovered", result.recovered)
        span.set_attribute("chokaq.archived", result.archived)
        if breakers or settings.execution.circuit_breaker.enabled:
            result = _expire_behind_breakers(storage, settings, result, events)
        _sweep_workers(storage, settings)
        _purge_events(storage, settings)
    ins = instruments()
    ins.sweeps.add(1)
    if result.archived:
        ins.dlq.add(result.archived, {"reason": "Zombie"})
    if result.retried_zombies:
        ins.retried.add(result.retried_zombies, {"reason": "Zombie"})
    if result.recovered or result.archived or result.retried_zombies:
        log.warning(
            "ZombieRescue: recovered %d abandoned, archived %d %s, retried %d idempotent",
            result.recovered,
            result.archived,
            "zombie" if result.archived == 1 else "zombies",
            result.retried_zombies,
        )
        if events is not None:
            events.publish(
                "zombie.rescue",
                recovered=result.recovered,
                archived=result.archived,
                retried=result.retried_zombies,
                ids=result.zombie_ids[:50],
            )
    if handlers and result.zombie_ids:
        from chokaq.runtime.verify import verify_zombies

        verify_zombies(storage, handlers, result.zombie_ids)
    return result


def _expire_behind_breakers(
    storage: Storage, settings: ChokaQSettings, result: SweepResult, events: EventBus | None
) -> SweepResult:
    from chokaq.storage import BreakerStore

    ids = BreakerStore(storage).expire_waiting(settings.retry.max_job_age, storage.settings.cleanup_batch_size)
    if not ids:
        return result
    instruments().dlq.add(len(ids), {"reason": "CircuitBreakerOpen"})
    log.warning("circuit breakers: %d job(s) waited past Retry.MaxJobAge and went to the DLQ", len(ids))
    if events is not None:
        events.publish_many("job.failed", [{"id": i, "reason": "CircuitBreakerOpen"} for i in ids[:50]])
    return dataclasses.replace(result, breaker_expired=len(ids))


_workers_failing = False
_events_failing = False


def _purge_events(storage: Storage, settings: ChokaQSettings) -> None:
    """The event feed bounded (Events.Retention, Events.MaxRows), after the jobs' sweep and never in
    its way: a failure here (a database not yet upgraded) is logged once, as for Workers."""
    global _events_failing
    try:
        purged = purge_events(storage, max_age=settings.events.retention, max_rows=settings.events.max_rows)
    except Exception as exc:
        if not _events_failing:
            _events_failing = True
            reason = redact((str(exc).strip().splitlines() or [type(exc).__name__])[0])[:300]
            log.warning("the sweep could not purge the event feed (%s: %s)", type(exc).__name__, reason)
        return
    _events_failing = False
    if purged:
        log.info("purged %d event feed row(s) past Events.Retention or Events.MaxRows", purged)


def _sweep_workers(storage: Storage, settings: ChokaQSettings) -> None:
    """The Workers rows (docs/workers.md): live ones silent past Recovery.ProcessingZombieTimeout
    marked lost, old stopped and lost ones pruned (Recovery.WorkerRetention). After the jobs' sweep,
    and never in its way: a failure here (a database not yet upgraded) is logged once."""
    global _workers_failing
    try:
        lost, pruned = WorkerDirectory(storage).sweep(
            silent_for=settings.recovery.processing_zombie_timeout, retention=settings.recovery.worker_retention
        )
    except Exception as exc:
        if not _workers_failing:
            _workers_failing = True
            reason = redact((str(exc).strip().splitlines() or [type(exc).__name__])[0])[:300]
            log.warning(
                "the sweep could not update Workers (%s: %s); jobs are swept all the same", type(exc).__name__, reason
            )
        return
    _workers_failing = False
    if lost:
        log.warning(
            "%d %s silent past Recovery.ProcessingZombieTimeout: marked lost",
            lost,
            "worker" if lost == 1 else "workers",
        )
    if pruned:
        log.info(
            "pruned %d stopped or lost %s past Recovery.WorkerRetention", pruned, "worker" if pruned == 1 else "workers"
        )


def sweep_outlasting(
    storage: Storage, settings: ChokaQSettings, budget: float | None = None, *, events: EventBus | None = None
) -> SweepResult:
    """One sweep that waits out a database outage of up to ``budget`` seconds (default
    Storage.OutageTolerance) with capped backoff, for callers that run it once (the Functions
    timer). Every sweep statement is safe to replay: a move that committed unheard has nothing left
    to move the second time."""
    limit = settings.storage.outage_tolerance if budget is None else budget
    outage = Outage(limit)
    attempt = 0
    while True:
        try:
            result = run_sweep(storage, settings, events=events)
            outage.succeeded()
            return result
        except Exception as exc:
            delay = backoff(attempt)
            if not is_transient(exc) or outage.down_for + delay > limit:
                raise
            attempt += 1
            outage.failed("sweep", exc, delay)
            time.sleep(delay)


def sweep_forever(
    storage: Storage,
    settings: ChokaQSettings,
    stop: threading.Event,
    events: EventBus | None = None,
    breakers: bool = False,
    handlers: Mapping[str, Handler] | None = None,
) -> None:
    """Sweep every Recovery.ScanInterval until ``stop``; a failed sweep is logged, never fatal.
    While the database is away: one line per try, and the next sweep as soon as it answers again."""
    outage = Outage(settings.storage.outage_tolerance)
    while not stop.is_set():
        try:
            run_sweep(storage, settings, events=events, breakers=breakers, handlers=handlers)
            outage.succeeded()
        except Exception as exc:
            if is_transient(exc):
                outage.failed("sweep", exc, settings.recovery.scan_interval)
            else:
                log.exception("ZombieRescue sweep failed")
        stop.wait(settings.recovery.scan_interval)
