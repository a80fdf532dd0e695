"""Recurring jobs: list (viewer), pause, resume and run now (operator), cron edit (admin)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from chokaq.api.common import ERRORS, NOT_FOUND, Admin, Operator, Viewer, actor, chokaq_app, operations
from chokaq.api.models_schedules import ScheduleListOut, ScheduleName, ScheduleOut, SchedulePatchIn, ScheduleRunOut
from chokaq.domain import limits
from chokaq.domain.models import JobRecord
from chokaq.domain.schedules import ScheduleInfo, describe
from chokaq.domain.states import Location
from chokaq.operations.job_out import iso
from chokaq.runtime.app import ChokaQ

router = APIRouter(prefix="/api/schedules", tags=["schedules"])
Name = Annotated[ScheduleName, Path(max_length=limits.MAX_SCHEDULE_NAME_LEN)]


def outcome(job: JobRecord | None) -> str:
    if job is None:
        return "gone"  # purged by retention, or never stored
    if job.location is Location.ARCHIVE:
        return "Succeeded"
    if job.location is Location.DLQ:
        return job.failure_reason.label if job.failure_reason is not None else "DLQ"
    return job.status.name.capitalize() if job.status is not None else "Pending"


def schedule_out(app: ChokaQ, s: ScheduleInfo) -> ScheduleOut:
    job = app.storage.get_job(s.last_job_id) if s.last_job_id else None
    return ScheduleOut(
        name=s.name,
        cron=s.cron,
        cron_in_words=describe(s.cron),
        time_zone=s.time_zone,
        job_type=s.job_type,
        queue=s.queue,
        payload=s.payload,
        missed_policy=s.missed_policy,
        missed_max=s.missed_max,
        next_due_utc=iso(s.next_due_utc),
        last_slot_utc=iso(s.last_slot_utc),
        last_fired_utc=iso(s.last_fired_utc),
        last_job_id=s.last_job_id,
        last_job_outcome=outcome(job) if s.last_job_id else None,
        is_paused=s.is_paused,
        is_orphaned=s.is_orphaned,
        last_modified_by=s.last_modified_by,
        last_updated_utc=iso(s.last_updated_utc),
    )


@router.get("", response_model=ScheduleListOut, responses=ERRORS)
def list_schedules(request: Request, who: Viewer) -> ScheduleListOut:
    """Every schedule with its next slot, last firing and outcome (docs/schedules.md)."""
    app = chokaq_app(request)
    return ScheduleListOut(items=[schedule_out(app, s) for s in operations(request).list_schedules()])


@router.post("/{name}/pause", response_model=ScheduleOut, responses={**ERRORS, **NOT_FOUND})
def pause_schedule(request: Request, name: Name, who: Operator) -> ScheduleOut:
    """Stop firing until resumed (audited)."""
    return schedule_out(chokaq_app(request), operations(request).pause_schedule(actor(who), name, True))


@router.post("/{name}/resume", response_model=ScheduleOut, responses={**ERRORS, **NOT_FOUND})
def resume_schedule(request: Request, name: Name, who: Operator) -> ScheduleOut:
    """Fire again from the next slot after now; the slots while paused are not fired (audited)."""
    return schedule_out(chokaq_app(request), operations(request).pause_schedule(actor(who), name, False))


@router.post("/{name}/run", response_model=ScheduleRunOut, responses={**ERRORS, **NOT_FOUND})
def run_schedule(request: Request, name: Name, who: Operator) -> ScheduleRunOut:
    """Enqueue one job now; the regular slots do not move (audited)."""
    return ScheduleRunOut(job_id=operations(request).run_schedule(actor(who), name))


@router.patch("/{name}", response_model=ScheduleOut, responses={**ERRORS, **NOT_FOUND})
def patch_schedule(request: Request, name: Name, body: SchedulePatchIn, who: Admin) -> ScheduleOut:
    """Change the cron expression or time zone (admin; audited). Code stays the source of truth:
    the next worker or sweep start-up writes the code's definition again."""
    info = operations(request).edit_schedule(actor(who), name, cron=body.cron, tz=body.time_zone)
    return schedule_out(chokaq_app(request), info)
