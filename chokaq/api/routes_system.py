"""Health, stats, audit and archive retention (GET /api/meta is in routes_meta)."""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from chokaq.api.common import ERRORS, Admin, Viewer, actor, admin_store, chokaq_app, figures, operations
from chokaq.api.models import (
    ArchivePurgeIn,
    ArchivePurgeOut,
    AuditOut,
    AuditPageOut,
    HealthOut,
    QueueStatsOut,
    StatsOut,
    Text,
    TopErrorOut,
    TotalsOut,
    figures_out,
    naive_utc,
)
from chokaq.domain import limits
from chokaq.operations.job_out import iso

log = logging.getLogger("chokaq.api")
router = APIRouter(prefix="/api")


@router.get(
    "/health",
    response_model=HealthOut,
    tags=["system"],
    responses={503: {"model": HealthOut, "description": "database unreachable"}},
)
def health(request: Request) -> Any:
    """Liveness and database reachability. Needs no sign-in (probes)."""
    try:
        chokaq_app(request).storage.ping()
    except Exception as exc:
        log.warning("health: database unreachable: %s", str(exc).splitlines()[0] if str(exc) else type(exc))
        return JSONResponse({"status": "error", "db": "unreachable"}, status_code=503)
    return HealthOut(status="ok", db="ok")


@router.get("/stats", response_model=StatsOut, tags=["system"], responses=ERRORS)
def stats(request: Request, who: Viewer) -> StatsOut:
    """Per-queue sizes and totals, recent rates, the top error groups. Sizes of a table larger than
    Admin.ExactCountLimit come from a count at most Admin.LargeCountMaxAge old (``figures`` says)."""
    f = figures(request).read()
    queues = []
    totals = TotalsOut()
    for s in f.queues:
        d = asdict(s)
        d["last_activity_utc"] = iso(s.last_activity_utc)
        queues.append(QueueStatsOut(**d))
        for key in ("pending", "fetched", "processing", "succeeded_total", "failed_total", "retried_total", "dlq_size"):
            setattr(totals, key, getattr(totals, key) + getattr(s, key))
        if s.oldest_pending_lag_seconds is not None:
            totals.oldest_pending_lag_seconds = max(
                totals.oldest_pending_lag_seconds or 0.0, s.oldest_pending_lag_seconds
            )
    top = [TopErrorOut(**{**e, "last_failed_utc": iso(e["last_failed_utc"])}) for e in f.top_errors]
    return StatsOut(
        queues=queues,
        totals=totals,
        figures=figures_out(f),
        rates=admin_store(request).recent_rates(),
        top_errors=top,
    )


@router.get("/audit", response_model=AuditPageOut, tags=["system"], responses=ERRORS)
def audit(
    request: Request,
    who: Viewer,
    job_id: Annotated[Text | None, Query(max_length=limits.MAX_JOB_ID_LEN)] = None,
    actor_name: Annotated[Text | None, Query(alias="actor", max_length=limits.MAX_ACTOR_LEN)] = None,
    page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
    page_size: Annotated[int, Query(ge=1, le=limits.MAX_BULK_IDS)] = 100,
) -> AuditPageOut:
    """Operator actions, newest first."""
    rows, total, lower = admin_store(request).audit_page(
        job_id=job_id, actor=actor_name, page=page, page_size=page_size
    )
    items = [AuditOut(**{**r, "at_utc": iso(r["at_utc"])}) for r in rows]
    return AuditPageOut(items=items, total=total, page=page, page_size=page_size, total_is_lower_bound=lower)


@router.post("/archive/purge", response_model=ArchivePurgeOut, tags=["archive"], responses=ERRORS)
def archive_purge(request: Request, body: ArchivePurgeIn, who: Admin) -> ArchivePurgeOut:
    """Delete archived jobs finished before ``older_than``, in bounded batches (Storage.CleanupBatchSize)."""
    older_than = naive_utc(body.older_than)
    assert older_than is not None
    return ArchivePurgeOut(deleted=operations(request).purge_archive(actor(who), older_than))
