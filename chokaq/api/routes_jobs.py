"""Jobs in the hot table and the archive: enqueue, show, list, edit Pending, reschedule, cancel."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import ValidationError

from chokaq.api.common import (
    CONFLICT,
    ERRORS,
    NOT_FOUND,
    Operator,
    PayloadInvalid,
    Viewer,
    actor,
    admin_store,
    check_job_id,
    chokaq_app,
    edited_payload,
    field_errors,
    operations,
)
from chokaq.api.models import (
    CancelIn,
    CancelOut,
    EnqueueIn,
    EnqueueOut,
    FieldError,
    JobEditIn,
    JobOut,
    JobPageOut,
    QueueName,
    RescheduleIn,
    Tags,
    Text,
    TypeName,
    naive_utc,
)
from chokaq.domain import limits
from chokaq.domain.errors import NotFoundError
from chokaq.domain.states import JobStatus, Location
from chokaq.operations.job_out import steps_out
from chokaq.storage import JobEdit, JobFilter, load_steps

router = APIRouter(prefix="/api/jobs", tags=["jobs"])

JobIdPath = Annotated[str, Path(description="job id")]


@router.post(
    "",
    response_model=EnqueueOut,
    status_code=201,
    responses={**ERRORS, 200: {"model": EnqueueOut, "description": "duplicate idempotency key"}},
)
def enqueue(request: Request, response: Response, body: EnqueueIn, who: Operator) -> EnqueueOut:
    """Store a job. A live duplicate idempotency key returns the existing id with 200."""
    app = chokaq_app(request)
    try:
        req = app.prepare(
            body.type,
            {} if body.payload is None else body.payload,
            queue=body.queue,
            priority=body.priority,
            delay=body.delay_seconds,
            at=body.at,
            tags=body.tags,
            idempotency_key=body.idempotency_key,
            created_by=who.name[: limits.MAX_ACTOR_LEN],
        )
    except ValidationError as exc:
        raise PayloadInvalid(field_errors(exc, ("body", "payload"))) from None
    except ValueError as exc:
        raise PayloadInvalid([FieldError(loc=["body", "payload"], msg=str(exc), type="payload")]) from None
    job_id, created = operations(request).enqueue(req)
    if not created:
        response.status_code = 200
    return EnqueueOut(id=job_id, created=created)


@router.get("", response_model=JobPageOut, responses=ERRORS)
def list_jobs(
    request: Request,
    who: Viewer,
    location: Literal["hot", "archive"] = "hot",
    queue: Annotated[QueueName | None, Query(max_length=limits.MAX_QUEUE_LEN)] = None,
    type: Annotated[TypeName | None, Query(max_length=limits.MAX_TYPE_LEN)] = None,
    status: Literal["Pending", "Fetched", "Processing"] | None = None,
    tag: Annotated[Tags | None, Query(max_length=limits.MAX_TAGS_LEN)] = None,
    from_: Annotated[datetime | None, Query(alias="from")] = None,
    to: datetime | None = None,
    search: Annotated[Text | None, Query(max_length=200)] = None,
    min_attempts: Annotated[
        int | None, Query(ge=1, le=1_000_000, description="jobs that needed at least this many attempts (2: retried)")
    ] = None,
    worker: Annotated[
        str | None, Query(max_length=limits.MAX_WORKER_ID_LEN, description="the worker that ran it")
    ] = None,
    sort: Annotated[str | None, Query(max_length=40, description="a key of the location's sort whitelist")] = None,
    desc: bool = True,
    page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
    page_size: Annotated[int, Query(ge=1, le=limits.MAX_BULK_IDS)] = 100,
) -> JobPageOut:
    """Hot (Pending/Fetched/Processing) or archived jobs, filtered, sorted from a whitelist and paged."""
    f = JobFilter(
        queue=queue,
        type=type,
        status=JobStatus[status.upper()] if status else None,
        tag=tag,
        from_utc=naive_utc(from_),
        to_utc=naive_utc(to),
        search=search,
        min_attempts=min_attempts,
        worker=worker,
    )
    page_ = admin_store(request).list_jobs(
        Location(location), f, sort=sort, descending=desc, page=page, page_size=page_size
    )
    return JobPageOut(
        items=[JobOut.from_record(j, history=False) for j in page_.items],
        total=page_.total,
        page=page_.page,
        page_size=page_.page_size,
        total_is_lower_bound=page_.total_is_lower_bound,
    )


@router.post("/cancel", response_model=CancelOut, responses=ERRORS)
def cancel(request: Request, body: CancelIn, who: Operator) -> CancelOut:
    """Pending jobs -> DLQ as Cancelled. Jobs a worker holds are skipped and listed unless
    ``running`` is true: then they are cancelled too and their handlers told to stop (at once on
    PostgreSQL, else within a heartbeat interval); a late outcome of theirs is refused."""
    res = operations(request).cancel(actor(who), body.ids, running=body.running, reason=body.reason)
    return CancelOut(cancelled=res.affected, skipped_ids=res.skipped_ids, was_running=res.was_running)


@router.get("/{job_id}", response_model=JobOut, responses={**ERRORS, **NOT_FOUND})
def get_job(request: Request, job_id: JobIdPath, who: Viewer) -> JobOut:
    """The job wherever it is: hot, archive or DLQ."""
    rec = chokaq_app(request).storage.get_job(check_job_id(job_id))
    if rec is None:
        raise NotFoundError(f"no job {job_id!r} in hot, archive or DLQ")
    return JobOut.from_record(rec, steps=steps_out(load_steps(chokaq_app(request).storage, rec.id)))


@router.patch("/{job_id}", response_model=JobOut, responses={**ERRORS, **NOT_FOUND, **CONFLICT})
def edit_job(request: Request, job_id: JobIdPath, body: JobEditIn, who: Operator) -> JobOut:
    """Edit payload, tags or priority of a Pending job; 409 once a worker owns it."""
    ops = operations(request)
    rec = ops.job(check_job_id(job_id))
    text = edited_payload(chokaq_app(request), rec.type, body, who)
    edit = JobEdit(payload=text, tags=body.tags, priority=body.priority, force=body.force)
    return JobOut.from_record(ops.edit_pending(actor(who), job_id, edit))


@router.post("/{job_id}/reschedule", response_model=JobOut, responses={**ERRORS, **NOT_FOUND, **CONFLICT})
def reschedule_job(request: Request, job_id: JobIdPath, body: RescheduleIn, who: Operator) -> JobOut:
    """Move a Pending job's due time (``at``) or make it due now (``now``); 409 once a worker owns it."""
    rec = operations(request).reschedule(actor(who), check_job_id(job_id), body.at)
    return JobOut.from_record(rec)
