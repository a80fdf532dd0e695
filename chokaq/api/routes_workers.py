"""Workers (viewer): every worker process the database has heard from, live, stopped or lost, with
the jobs each holds now and the zombies the sweep took from it (docs/workers.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Request

from chokaq.api.common import ERRORS, Viewer, chokaq_app
from chokaq.api.models import ErrorOut, Text
from chokaq.api.models_workers import WorkerListOut, WorkerOut
from chokaq.domain import limits
from chokaq.domain.errors import NotFoundError
from chokaq.storage import WorkerDirectory

router = APIRouter(prefix="/api/workers", tags=["workers"])
WorkerId = Annotated[Text, Path(min_length=1, max_length=limits.MAX_WORKER_ID_LEN)]
NO_WORKER: dict[int | str, dict[str, Any]] = {404: {"model": ErrorOut, "description": "no such worker"}}


@router.get("", response_model=WorkerListOut, responses=ERRORS)
def list_workers(
    request: Request, who: Viewer, state: Literal["live", "stopped", "lost"] | None = None
) -> WorkerListOut:
    """Live workers first, then lost, then stopped; the most recently seen first in each (500 at most)."""
    app = chokaq_app(request)
    items = [WorkerOut.of(w) for w in WorkerDirectory(app.storage).list(state)]
    return WorkerListOut(items=items, lost_after_seconds=app.settings.recovery.processing_zombie_timeout)


@router.get("/{worker_id}", response_model=WorkerOut, responses={**ERRORS, **NO_WORKER})
def get_worker(request: Request, worker_id: WorkerId, who: Viewer) -> WorkerOut:
    """One worker with the jobs it holds now and its zombies (the first 100 of each; the counts are exact)."""
    info = WorkerDirectory(chokaq_app(request).storage).get(worker_id)
    if info is None:
        raise NotFoundError(f"no worker {worker_id[:100]!r}")
    return WorkerOut.of(info, detail=True)
