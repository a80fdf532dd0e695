"""History for the Deck's charts: GET /api/stats/history."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from chokaq.api.common import ERRORS, Viewer, chokaq_app
from chokaq.api.models import Text
from chokaq.domain import limits
from chokaq.domain.states import FailureReason
from chokaq.operations.job_out import iso
from chokaq.storage import WAIT_BASIS, load_history

router = APIRouter(prefix="/api")
Window = Literal["1h", "6h", "24h", "7d"]


class BucketOut(BaseModel):
    start_utc: str
    succeeded: int
    failed: dict[str, int] = Field(description="dead-lettered in this bucket, by FailureReason (zero counts left out)")
    failed_total: int
    wait_p50_ms: float | None = Field(description="queue wait p50 (see wait_basis); null: no job started")
    wait_p95_ms: float | None
    waits_measured: int = Field(description="archived jobs in the bucket with a start time (the percentiles' n)")
    mean_duration_ms: float | None


class HistoryOut(BaseModel):
    window: Window
    bucket_seconds: int
    start_utc: str
    end_utc: str
    queue: str | None
    reasons: list[str] = Field(description="every FailureReason label, in code order (the chart's stack order)")
    wait_basis: str = Field(
        description="started_minus_due: wait is start minus the time the last attempt fell due (jobs "
        "archived before migration 4: minus the enqueue time); percentiles come from a "
        "log-binned histogram, interpolated inside the bin"
    )
    archive_oldest_utc: str | None = Field(
        description="the oldest archived job still held: history before it was purged by retention"
    )
    buckets: list[BucketOut]


@router.get("/stats/history", response_model=HistoryOut, tags=["system"], responses=ERRORS)
def history(
    request: Request,
    who: Viewer,
    window: Window = "1h",
    queue: Annotated[Text | None, Query(min_length=1, max_length=limits.MAX_QUEUE_LEN)] = None,
) -> HistoryOut:
    """Succeeded, dead-lettered (by reason), queue wait p50/p95 and mean run time per time bucket:
    1 min buckets for 1h, 5 min for 6h, 15 min for 24h, 1 h for 7d. Counted from JobsArchive and
    JobsDLQ, so jobs purged from the archive are not in it."""
    h = load_history(chokaq_app(request).storage, window, queue=queue)
    return HistoryOut(
        window=window,
        bucket_seconds=h.bucket_seconds,
        start_utc=iso(h.start) or "",
        end_utc=iso(h.end) or "",
        queue=h.queue,
        reasons=[r.label for r in FailureReason],
        wait_basis=WAIT_BASIS,
        archive_oldest_utc=iso(h.archive_oldest),
        buckets=[
            BucketOut(
                start_utc=iso(b.start) or "",
                succeeded=b.succeeded,
                failed=b.failed,
                failed_total=b.failed_total,
                wait_p50_ms=b.wait_p50_ms,
                wait_p95_ms=b.wait_p95_ms,
                waits_measured=b.waits_measured,
                mean_duration_ms=b.mean_duration_ms,
            )
            for b in h.buckets
        ],
    )
