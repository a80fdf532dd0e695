"""Circuit breakers per job type: list (viewer), close now (operator, audited)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from chokaq.api.common import ERRORS, NOT_FOUND, Operator, Viewer, actor, operations
from chokaq.api.models import TypeName
from chokaq.api.models_breakers import BreakerListOut, BreakerOut
from chokaq.domain import limits
from chokaq.domain.breakers import BreakerState
from chokaq.operations.job_out import iso

router = APIRouter(prefix="/api/breakers", tags=["breakers"])
JobType = Annotated[TypeName, Path(max_length=limits.MAX_TYPE_LEN)]


def breaker_out(b: BreakerState) -> BreakerOut:
    return BreakerOut(
        job_type=b.job_type,
        state=b.state_name,
        failure_count=b.failure_count,
        window_start_utc=iso(b.window_start_utc),
        opened_at_utc=iso(b.opened_at_utc),
        open_until_utc=iso(b.open_until_utc),
        probes_in_flight=b.probes_in_flight,
        updated_by=b.updated_by,
        last_updated_utc=iso(b.last_updated_utc),
    )


@router.get("", response_model=BreakerListOut, responses=ERRORS)
def list_breakers(request: Request, who: Viewer) -> BreakerListOut:
    """Every job type whose breaker has counted a failure, open ones first."""
    items = sorted(operations(request).list_breakers(), key=lambda b: (b.state == 0, b.job_type))
    return BreakerListOut(items=[breaker_out(b) for b in items])


@router.post("/{job_type}/close", response_model=BreakerOut, responses={**ERRORS, **NOT_FOUND})
def close_breaker(request: Request, job_type: JobType, who: Operator) -> BreakerOut:
    """Close the type's breaker now: its jobs are claimed again (audited). 404 if the type has no
    breaker row; closing a closed breaker changes nothing."""
    return breaker_out(operations(request).close_breaker(actor(who), job_type))
