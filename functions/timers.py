"""Timer functions: the recovery sweep and retention (the archive, and the DLQ when Retention.DlqDays
is set). Neither needs a worker alive."""

from __future__ import annotations

import logging

import azure.functions as func

from chokaq import telemetry
from chokaq.operations.retention import run_retention
from chokaq.operations.service import Operations
from chokaq.runtime.app import ChokaQ
from chokaq.runtime.sweeper import sweep_outlasting
from chokaq.storage import Actor

log = logging.getLogger("chokaq.functions")

RETENTION_ACTOR = Actor("functions:retention", "admin")


def fire_schedules(app: ChokaQ, synced: list[bool]) -> int:
    """The sweep timer's schedules: the code's upserted once per host process, then the due ones
    fired (each slot once, whatever else fires them). A failure is logged: the sweep still ran."""
    try:
        if not synced:
            app.sync_schedules()
            synced.append(True)
        return sum(len(f.job_ids) for f in app.fire_schedules())
    except Exception:
        log.exception("schedules: firing failed; the next sweep run tries again")
        return 0


def blueprint(app: ChokaQ) -> func.Blueprint:
    bp = func.Blueprint()  # type: ignore[no-untyped-call]
    synced: list[bool] = []  # the code's schedules upserted by this host process

    @bp.function_name("sweep")
    @bp.timer_trigger(arg_name="timer", schedule="%CHOKAQ_SWEEP_SCHEDULE%", run_on_startup=False, use_monitor=False)
    def sweep(timer: func.TimerRequest) -> None:
        """Recovery sweep: Fetched too long -> Pending, expired heartbeat -> DLQ (Zombie); then due schedules."""
        ours = telemetry.configure("chokaq-functions")
        if timer.past_due:
            log.info("sweep timer is past due; sweeping now")
        try:
            # Waits out a failover (Storage.OutageTolerance) instead of failing this run.
            # Its own span and metrics; a rescue is announced on the app's bus, which the admin API
            # in this same Functions process serves from /api/events/recent.
            result = sweep_outlasting(app.storage, app.settings, events=app.bus)
            fired = fire_schedules(app, synced)
        finally:
            if ours:
                telemetry.shutdown()  # flush: the instance may be reclaimed before the next export
        log.info(
            "sweep: recovered %d, archived %d zombies, retried %d; schedules enqueued %d",
            result.recovered,
            result.archived,
            result.retried_zombies,
            fired,
        )

    @bp.function_name("retention")
    @bp.timer_trigger(arg_name="timer", schedule="%CHOKAQ_RETENTION_SCHEDULE%", run_on_startup=False, use_monitor=True)
    def retention(timer: func.TimerRequest) -> None:
        """Delete archived jobs older than Retention.ArchiveDays and, when Retention.DlqDays is set,
        dead jobs older than that, in batches of Storage.CleanupBatchSize."""
        ours = telemetry.configure("chokaq-functions")
        try:
            with telemetry.tracer().start_as_current_span("chokaq.retention") as span:
                result = run_retention(Operations(app), RETENTION_ACTOR)
                span.set_attribute("chokaq.deleted", result.archive_deleted)
                span.set_attribute("chokaq.dlq_deleted", result.dlq_deleted)
        finally:
            if ours:
                telemetry.shutdown()
        log.info("retention: %s", result.as_dict())

    return bp
