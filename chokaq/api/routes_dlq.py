"""The dead-letter queue: list, inspect, edit, resurrect (one or many), purge."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Body, Path, Query, Request

from chokaq.api.common import (
    CONFLICT,
    ERRORS,
    NOT_FOUND,
    Admin,
    Operator,
    Viewer,
    actor,
    admin_store,
    check_job_id,
    chokaq_app,
    edited_payload,
    operations,
)
from chokaq.api.models import (
    BulkIn,
    BulkOut,
    DlqEditIn,
    DlqFilterIn,
    DlqJobOut,
    IncidentOut,
    IncidentsOut,
    JobOut,
    JobPageOut,
    QueueName,
    ResurrectIn,
    ResurrectManyIn,
    Tags,
    Text,
    TypeName,
    ZombieOut,
    naive_utc,
)
from chokaq.domain import limits
from chokaq.domain.models import JobRecord
from chokaq.domain.states import FailureReason, Location
from chokaq.operations.job_out import iso, steps_out
from chokaq.operations.rules import parse_failure_reason
from chokaq.operations.service import Selection
from chokaq.runtime.app import ChokaQ
from chokaq.storage import BulkResult, JobEdit, JobFilter, crash_incidents, load_steps

router = APIRouter(prefix="/api/dlq", tags=["dlq"])

JobIdPath = Annotated[str, Path(description="job id")]


def _filter(f: DlqFilterIn) -> JobFilter:
    return JobFilter(
        queue=f.queue,
        type=f.type,
        failure_reason=parse_failure_reason(f.failure_reason),
        tag=f.tag,
        from_utc=naive_utc(f.from_),
        to_utc=naive_utc(f.to),
        search=f.search,
        worker=f.worker,
    )


def _bulk_out(res: BulkResult) -> BulkOut:
    return BulkOut(
        matched=res.matched,
        affected=res.affected,
        sample_ids=res.sample_ids,
        dry_run=res.dry_run,
        skipped_ids=res.skipped_ids,
        snapshot=res.snapshot,
    )


@router.get("", response_model=JobPageOut, responses=ERRORS)
def list_dlq(
    request: Request,
    who: Viewer,
    queue: Annotated[QueueName | None, Query(max_length=limits.MAX_QUEUE_LEN)] = None,
    type: Annotated[TypeName | None, Query(max_length=limits.MAX_TYPE_LEN)] = None,
    failure_reason: Annotated[Text | None, Query(max_length=40, description="name (Zombie) or number")] = None,
    tag: Annotated[Tags | None, Query(max_length=limits.MAX_TAGS_LEN)] = None,
    from_: Annotated[datetime | None, Query(alias="from")] = None,
    to: datetime | None = None,
    search: Annotated[Text | None, Query(max_length=200, description="id, type, tags or error text")] = None,
    min_attempts: Annotated[
        int | None, Query(ge=1, le=1_000_000, description="jobs that needed at least this many attempts (2: retried)")
    ] = None,
    worker: Annotated[
        str | None, Query(max_length=limits.MAX_WORKER_ID_LEN, description="the worker that ran it")
    ] = None,
    sort: Annotated[str | None, Query(max_length=40, description="a key of the DLQ sort whitelist")] = None,
    desc: bool = True,
    page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
    page_size: Annotated[int, Query(ge=1, le=limits.MAX_BULK_IDS)] = 100,
) -> JobPageOut:
    """Dead jobs, filtered and sorted (failed, created, queue, type, reason, attempts, id), one page."""
    f = JobFilter(
        queue=queue,
        type=type,
        failure_reason=parse_failure_reason(failure_reason),
        tag=tag,
        from_utc=naive_utc(from_),
        to_utc=naive_utc(to),
        search=search,
        min_attempts=min_attempts,
        worker=worker,
    )
    p = admin_store(request).list_jobs(Location.DLQ, f, sort=sort, descending=desc, page=page, page_size=page_size)
    return JobPageOut(
        items=[JobOut.from_record(j, history=False) for j in p.items],
        total=p.total,
        page=p.page,
        page_size=p.page_size,
        total_is_lower_bound=p.total_is_lower_bound,
    )


def _selection(body: BulkIn) -> Selection:
    """A bulk request's target: ids, or a filter with its cap and its preview's bound."""
    if body.filter is not None:
        return Selection(
            f=_filter(body.filter),
            max_jobs=body.max_jobs,
            dry_run=body.dry_run,
            expected_count=body.expected_count,
            snapshot=body.snapshot,
        )
    return Selection(ids=body.ids, dry_run=body.dry_run)


@router.get("/incidents", response_model=IncidentsOut, responses=ERRORS)
def list_incidents(request: Request, who: Viewer) -> IncidentsOut:
    """Crash incidents: the zombies each worker left, newest first: how many are still in the DLQ
    (stopped inside a step, between steps, or without steps) and how many left it since, by what."""
    app = chokaq_app(request)
    found, capped = crash_incidents(
        app.storage, resolved_within=timedelta(seconds=app.settings.recovery.worker_retention)
    )
    items = [
        IncidentOut.model_validate({k: iso(v) if isinstance(v, datetime) else v for k, v in vars(i).items()})
        for i in found
    ]
    return IncidentsOut(items=items, capped=capped)


@router.post("/resurrect", response_model=BulkOut, responses={**ERRORS, **CONFLICT})
def resurrect_many(request: Request, body: ResurrectManyIn, who: Operator) -> BulkOut:
    """Back to Pending by ids (<= 1000) or by filter (max_jobs, default 100, cap 1000).

    A filter action needs its preview: ``dry_run: true`` returns ``matched`` and a ``snapshot``; the
    action sends them back as ``expected_count`` and ``snapshot``, touches only jobs inside the
    snapshot, and is refused (409) when more jobs match than were confirmed. ``steps``: their step
    journals resumed (the default) or cleared."""
    return _bulk_out(operations(request).resurrect_many(actor(who), _selection(body), body.steps))


@router.post("/purge", response_model=BulkOut, responses={**ERRORS, **CONFLICT})
def purge(request: Request, body: BulkIn, who: Admin) -> BulkOut:
    """Delete dead jobs for good, by ids or by filter; a filter needs its preview (see resurrect)."""
    return _bulk_out(operations(request).purge_dlq(actor(who), _selection(body)))


@router.get("/{job_id}", response_model=DlqJobOut, responses={**ERRORS, **NOT_FOUND})
def inspect(request: Request, job_id: JobIdPath, who: Viewer) -> DlqJobOut:
    """Every field, the full error details, and the handler's payload schema (if it has a model)."""
    app = chokaq_app(request)
    rec = operations(request).dead_job(check_job_id(job_id))
    handler = app.handlers.get(rec.type)
    return DlqJobOut.from_record(
        rec,
        payload_schema=handler.payload_schema() if handler else None,
        zombie=zombie_details(app, rec),
        steps=steps_out(load_steps(app.storage, rec.id)),
    )


def zombie_details(app: ChokaQ, rec: JobRecord) -> ZombieOut | None:
    if rec.failure_reason is not FailureReason.ZOMBIE:
        return None
    queue = next((q for q in app.storage.list_queues() if q.name == rec.queue), None)
    override = queue.zombie_timeout_seconds if queue else None
    silent_from = rec.heartbeat_utc or rec.started_at_utc
    handler = app.handlers.get(rec.type)
    return ZombieOut(
        last_heartbeat_utc=iso(rec.heartbeat_utc),
        silent_seconds=(rec.failed_at_utc - silent_from).total_seconds() if silent_from and rec.failed_at_utc else None,
        timeout_seconds=float(override) if override is not None else app.settings.recovery.processing_zombie_timeout,
        timeout_source="queue" if override is not None else "default",
        worker_id=rec.worker_id,
        handler_idempotent=handler.idempotent if handler else None,
        handler_retries_zombies=handler.retry_zombies if handler else None,
    )


@router.patch("/{job_id}", response_model=JobOut, responses={**ERRORS, **NOT_FOUND, **CONFLICT})
def edit_dead(request: Request, job_id: JobIdPath, body: DlqEditIn, who: Operator) -> JobOut:
    """Fix payload and/or tags; the job stays in the DLQ."""
    ops = operations(request)
    rec = ops.dead_job(check_job_id(job_id))
    text = edited_payload(chokaq_app(request), rec.type, body, who)
    edit = JobEdit(payload=text, tags=body.tags, force=body.force)
    return JobOut.from_record(ops.edit_dead(actor(who), job_id, edit))


@router.post("/{job_id}/resurrect", response_model=JobOut, responses={**ERRORS, **NOT_FOUND, **CONFLICT})
def resurrect(
    request: Request, job_id: JobIdPath, who: Operator, body: Annotated[ResurrectIn | None, Body()] = None
) -> JobOut:
    """One atomic move back to Pending, optionally with a fixed payload, tags or priority."""
    ops = operations(request)
    body = body or ResurrectIn()
    rec = ops.job(check_job_id(job_id))
    text = edited_payload(chokaq_app(request), rec.type, body, who)
    edit = JobEdit(payload=text, tags=body.tags, priority=body.priority, force=body.force)
    rec = ops.resurrect(actor(who), job_id, edit, steps=body.steps, keep_steps=body.keep_steps)
    return JobOut.from_record(rec, steps=steps_out(load_steps(chokaq_app(request).storage, job_id)))
