"""Queue controls: pause, zombie timeout override, max workers."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request

from chokaq.api.common import ERRORS, NOT_FOUND, Operator, Viewer, actor, admin_store, chokaq_app, iso, publish
from chokaq.api.models import QueueListOut, QueueName, QueueOut, QueuePatchIn
from chokaq.domain import limits
from chokaq.domain.errors import JobValidationError, NotFoundError
from chokaq.domain.keys import check_key
from chokaq.domain.models import QueueInfo

router = APIRouter(prefix="/api/queues", tags=["queues"])


def queue_out(q: QueueInfo) -> QueueOut:
    return QueueOut(name=q.name, is_paused=q.is_paused, is_active=q.is_active,
                    zombie_timeout_seconds=q.zombie_timeout_seconds, max_workers=q.max_workers,
                    last_updated_utc=iso(q.last_updated_utc))


@router.get("", response_model=QueueListOut, responses=ERRORS)
def list_queues(request: Request, who: Viewer) -> QueueListOut:
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
    kw: dict[str, Any] = {}
    changes: dict[str, Any] = {}
    if "paused" in given and body.paused is not None:
        kw["paused"] = changes["paused"] = body.paused
    if "zombie_timeout_seconds" in given:
        floor = 3 * chokaq_app(request).settings.execution.heartbeat_interval_max
        if body.zombie_timeout_seconds is not None and body.zombie_timeout_seconds < floor:
            raise JobValidationError(
                f"zombie_timeout_seconds must be at least 3x Execution.HeartbeatIntervalMax (>= {floor:g}s)"
            )
        kw["zombie_timeout_seconds"] = changes["zombie_timeout_seconds"] = body.zombie_timeout_seconds
    if "max_workers" in given:
        kw["max_workers"] = changes["max_workers"] = body.max_workers
    if not kw:
        raise JobValidationError("nothing to change: give paused, zombie_timeout_seconds or max_workers")
    check_key("queue", name)  # a malformed name is 422 with its reason, before "no such queue"
    if not body.create and all(q.name != name for q in chokaq_app(request).storage.list_queues()):
        # A typo must not create a queue (and its audit trail) that no worker serves.
        raise NotFoundError(f"no queue {name!r}; send \"create\": true to create it")
    info: QueueInfo = admin_store(request).queue_changed(name, actor(who), changes, **kw)
    publish("queue.changed", who, queue=name, **changes)
    return queue_out(info)
