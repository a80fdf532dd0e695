"""GET /api/meta: who is calling, and the vocabulary the API speaks.

The Deck reads its words and numbers from here at start instead of declaring them again: roles and
the endpoints each may call, job statuses, failure reasons, event kinds, history windows and
limits. Each value is read from the code that enforces it (the route dependencies,
``domain/states.py``, ``runtime/events.py``, ``domain/limits.py``, the request models), so a change
there reaches every client with no second copy to forget.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Iterable, Iterator
from typing import Any

import annotated_types
from fastapi import APIRouter, FastAPI, Request
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field, TypeAdapter
from pydantic.fields import FieldInfo

from chokaq.api.auth import ADMIN, OPERATOR, ROLE_RANK, VIEWER
from chokaq.api.common import ERRORS, Admin, Operator, Viewer, chokaq_app
from chokaq.api.models import HandlerOut, MetaOut, Priority, QueuePatchIn
from chokaq.api.routes_history import Window
from chokaq.domain import limits
from chokaq.domain.states import FailureReason, JobStatus, Location
from chokaq.operations.rules import zombie_timeout_floor
from chokaq.runtime.events import EVENT_KINDS
from chokaq.storage import WINDOWS

router = APIRouter(prefix="/api")


class RoleOut(BaseModel):
    name: str
    rank: int = Field(description="a role may do everything a lower rank may")
    may: list[str] = Field(description='the endpoints this role may call, as "METHOD /path" (the route\'s template)')


class WindowOut(BaseModel):
    name: str = Field(description="the value of GET /api/stats/history?window=")
    seconds: int
    bucket_seconds: int


class LimitsOut(BaseModel):
    max_payload_bytes: int = Field(description="UTF-8 bytes of a job's payload")
    max_payload_depth: int = Field(description="nesting of a payload's arrays and objects")
    max_request_bytes: int
    max_tags_len: int
    max_queue_len: int
    max_type_len: int
    max_job_id_len: int
    max_idempotency_key_len: int
    max_bulk_ids: int = Field(description="ids per bulk request, and max_jobs per filter action")
    default_bulk_max_jobs: int = Field(description="max_jobs of a filter action that names none")
    page_size_default: int
    page_size_max: int
    page_sizes: list[int] = Field(description="page sizes to offer: the default, half the cap, the cap")
    priority_min: int
    priority_max: int
    default_priority: int
    max_workers_min: int
    max_workers_max: int
    zombie_timeout_seconds_min: int
    zombie_timeout_seconds_max: int


class ApiMetaOut(MetaOut):
    roles: list[RoleOut] = Field(description="lowest rank first")
    job_statuses: list[str] = Field(description="statuses of a job in the hot table, in code order")
    locations: list[str]
    failure_reasons: list[str] = Field(description="every FailureReason label, in code order")
    event_kinds: list[str] = Field(description="the kinds of event GET /api/events and /api/events/recent send")
    history_windows: list[WindowOut]
    limits: LimitsOut


# The three role checks the routes declare (``who: Viewer`` and so on), by the dependency they run.
_ROLE_OF_DEPENDENCY: dict[Any, str] = {
    typing.get_args(alias)[1].dependency: role
    for alias, role in ((Viewer, VIEWER), (Operator, OPERATOR), (Admin, ADMIN))
}


def _api_routes(routes: Iterable[Any]) -> Iterator[APIRoute]:
    """Every APIRoute, through routers included without a prefix (as ``create_api`` includes them).
    FastAPI 0.16x keeps an included router as one entry holding ``original_router``."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif hasattr(route, "original_router"):
            yield from _api_routes(route.original_router.routes)


def _least_roles(app: FastAPI) -> dict[str, str]:
    """``"METHOD /path"`` -> the least role its dependency demands, for each endpoint that demands one."""
    out: dict[str, str] = {}
    for route in _api_routes(app.router.routes):
        roles = [_ROLE_OF_DEPENDENCY[d.call] for d in route.dependant.dependencies if d.call in _ROLE_OF_DEPENDENCY]
        if roles:
            for method in sorted((route.methods or set()) - {"HEAD"}):
                out[f"{method} {route.path}"] = max(roles, key=ROLE_RANK.__getitem__)
    return out


def _roles(app: FastAPI) -> list[RoleOut]:
    least = _least_roles(app)
    return [
        RoleOut(name=role, rank=rank, may=[ep for ep, need in least.items() if ROLE_RANK[need] <= rank])
        for role, rank in sorted(ROLE_RANK.items(), key=lambda kv: kv[1])
    ]


def _bounds(metadata: Iterable[Any]) -> tuple[int, int]:
    """(least, greatest) integer a field's annotated_types constraints allow."""
    low, high = None, None
    for m in metadata:
        if isinstance(m, annotated_types.Ge):
            low = int(m.ge)  # type: ignore[call-overload]
        elif isinstance(m, annotated_types.Gt):
            low = int(m.gt) + 1  # type: ignore[call-overload]
        elif isinstance(m, annotated_types.Le):
            high = int(m.le)  # type: ignore[call-overload]
    if low is None or high is None:
        raise ValueError(f"no integer bounds in {list(metadata)!r}")
    return low, high


def _page_size(app: FastAPI) -> FieldInfo:
    """The page_size query parameter of GET /api/jobs (the DLQ and audit lists declare the same)."""
    for route in _api_routes(app.router.routes):
        if route.path == "/api/jobs" and "GET" in (route.methods or ()):
            for param in route.dependant.query_params:
                if param.name == "page_size":
                    return param.field_info
    raise LookupError("GET /api/jobs has no page_size parameter")


def _zombie_floor(request: Request) -> int:
    """The least zombie timeout PATCH /api/queues takes: the model's bound, raised by the heartbeat
    floor the operations rules enforce."""
    floor = zombie_timeout_floor(chokaq_app(request).settings.execution.heartbeat_interval_max)
    return max(_bounds(QueuePatchIn.model_fields["zombie_timeout_seconds"].metadata)[0], math.ceil(floor))


def _limits(request: Request) -> LimitsOut:
    app: FastAPI = request.app
    page = _page_size(app)
    page_default, page_max = int(page.default), _bounds(page.metadata)[1]
    priority = TypeAdapter(Priority).json_schema()
    workers = _bounds(QueuePatchIn.model_fields["max_workers"].metadata)
    zombie = _bounds(QueuePatchIn.model_fields["zombie_timeout_seconds"].metadata)
    return LimitsOut(
        max_payload_bytes=limits.MAX_PAYLOAD_BYTES,
        max_payload_depth=limits.MAX_PAYLOAD_DEPTH,
        max_request_bytes=limits.MAX_REQUEST_BYTES,
        max_tags_len=limits.MAX_TAGS_LEN,
        max_queue_len=limits.MAX_QUEUE_LEN,
        max_type_len=limits.MAX_TYPE_LEN,
        max_job_id_len=limits.MAX_JOB_ID_LEN,
        max_idempotency_key_len=limits.MAX_IDEMPOTENCY_KEY_LEN,
        max_bulk_ids=limits.MAX_BULK_IDS,
        default_bulk_max_jobs=limits.DEFAULT_BULK_MAX_JOBS,
        page_size_default=page_default,
        page_size_max=page_max,
        page_sizes=sorted({page_default, page_max // 2, page_max}),
        priority_min=priority["minimum"],
        priority_max=priority["maximum"],
        default_priority=limits.DEFAULT_PRIORITY,
        max_workers_min=workers[0],
        max_workers_max=workers[1],
        zombie_timeout_seconds_min=_zombie_floor(request),
        zombie_timeout_seconds_max=zombie[1],
    )


def _windows() -> list[WindowOut]:
    out = []
    for name in typing.get_args(Window):
        bucket, count = WINDOWS[name]
        out.append(WindowOut(name=name, seconds=bucket * count, bucket_seconds=bucket))
    return out


@router.get("/meta", response_model=ApiMetaOut, tags=["system"], responses=ERRORS)
def meta(request: Request, who: Viewer) -> ApiMetaOut:
    """The caller's role, the registered handlers, and the API's vocabulary and limits (the Deck
    hides what the role cannot do and offers only what the API accepts)."""
    app = chokaq_app(request)
    handlers = [
        HandlerOut(type=h.name, queue=h.queue, payload_schema=h.payload_schema())
        for h in sorted(app.handlers.values(), key=lambda h: h.name)
    ]
    return ApiMetaOut(
        role=who.role,
        actor=who.name,
        handlers=handlers,
        dev_open=bool(request.app.state.dev_open),
        roles=_roles(request.app),
        job_statuses=[s.name.capitalize() for s in JobStatus],
        locations=[loc.value for loc in Location],
        failure_reasons=[r.label for r in FailureReason],
        event_kinds=list(EVENT_KINDS),
        history_windows=_windows(),
        limits=_limits(request),
    )
