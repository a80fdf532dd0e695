"""Queue controls: pause, zombie timeout override, max workers."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from chokaq.api.common import ERRORS, NOT_FOUND, Operator, Viewer, actor, chokaq_app, operations
from chokaq.api.models import QueueListOut, QueueName, QueueOut, QueuePatchIn
from chokaq.domain import limits
from chokaq.domain.models import QueueInfo
from chokaq.operations.job_out import iso
from chokaq.operations.service import QueueChanges

router = APIRouter(prefix="/api/queues", tags=["queues"])


def queue_out(q: QueueInfo) -> QueueOut:
    return QueueOut(
        name=q.name,
        is_paused=q.is_paused,
        is_active=q.is_active,
        zombie_timeout_seconds=q.zombie_timeout_seconds,
        max_workers=q.max_workers,
        last_updated_utc=iso(q.last_updated_utc),
    )


@router.get("", response_model=QueueListOut, responses=ERRORS)
def list_queues(request: Request, who: Viewer) -> QueueListOut:
    """Every queue with its controls: paused, zombie timeout and max workers overrides."""
    return QueueListOut(items=[queue_out(q) for q in chokaq_app(request).storage.list_queues()])


@router.patch("/{name}", response_model=QueueOut, responses={**ERRORS, **NOT_FOUND})
def patch_queue(
    request: Request,
    name: Annotated[QueueName, Path(max_length=limits.MAX_QUEUE_LEN)],
    body: QueuePatchIn,
    who: Operator,
) -> QueueOut:
    """Change queue controls. Absent fields stay; ``null`` clears the zombie-timeout or max-workers override."""
    given = body.model_fields_set
    changes: QueueChanges = {}
    if "paused" in given and body.paused is not None:
        changes["paused"] = body.paused
    if "zombie_timeout_seconds" in given:
        changes["zombie_timeout_seconds"] = body.zombie_timeout_seconds
    if "max_workers" in given:
        changes["max_workers"] = body.max_workers
    return queue_out(operations(request).change_queue(actor(who), name, changes, create=body.create))
