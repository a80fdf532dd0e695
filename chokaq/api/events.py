"""Live events for the Deck: Server-Sent Events, and a JSON polling fallback.

Events are hints to reload; the database is the truth. This process's bus carries what happens
here (edits, resurrects, worker outcomes, zombie rescues run in this process). Work done by
other processes shows up through the ``stats.updated`` tick, computed from the database every
``Admin.EventPollInterval`` seconds by one poll shared by all streams (:mod:`chokaq.api.stream_hub`).

Each SSE message is unnamed (``data:`` only, so ``EventSource.onmessage`` receives all of them);
the JSON carries ``kind``. The ``id:`` is the event time, so a reconnecting browser's
``Last-Event-ID`` replays what it missed from the recent-events buffer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException

from chokaq.api.common import ERRORS, Viewer, chokaq_app
from chokaq.api.models import ErrorOut, EventOut, RecentEventsOut
from chokaq.api.stream_hub import StreamHub, TooManyStreams
from chokaq.runtime.app import ChokaQ
from chokaq.runtime.events import Event, bus

log = logging.getLogger("chokaq.api.events")
router = APIRouter(prefix="/api/events", tags=["events"])


def _sse(data: dict[str, Any], event_id: float | None = None) -> bytes:
    head = f"id: {event_id!r}\n" if event_id is not None else ""
    return f"{head}data: {json.dumps(data, default=str, separators=(',', ':'))}\n\n".encode()


def _since(after: float | None) -> list[Event]:
    if after is None:
        return []
    return [e for e in list(bus.recent) if e.at > after]


def stats_snapshot(app: ChokaQ) -> dict[str, Any]:
    rows = app.storage.queue_stats()
    keys = ("pending", "fetched", "processing", "succeeded_total", "failed_total", "retried_total", "dlq_size")
    totals = {k: sum(getattr(r, k) for r in rows) for k in keys}
    queues = {r.queue: {k: getattr(r, k) for k in keys} for r in rows}
    return {"totals": totals, "queues": queues}


def stream_hub(request: Request) -> StreamHub:
    hub: StreamHub | None = getattr(request.app.state, "stream_hub", None)
    if hub is None:
        app = chokaq_app(request)
        admin = app.settings.admin
        hub = request.app.state.stream_hub = StreamHub(
            lambda: stats_snapshot(app), interval=admin.event_poll_interval, max_total=admin.max_event_streams,
            max_per_principal=admin.max_event_streams_per_principal)
    return hub


@router.get("", responses={**ERRORS, 200: {"content": {"text/event-stream": {}}, "description": "event stream"},
                           429: {"model": ErrorOut, "description": "too many open streams"}})
async def stream(
    request: Request,
    who: Viewer,
    after: Annotated[float | None, Query(description="replay buffered events newer than this time")] = None,
    max_events: Annotated[int | None, Query(ge=1, le=10_000, description="close after this many")] = None,
    last_event_id: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> StreamingResponse:
    """Server-Sent Events: bus events as they happen plus a ``stats.updated`` tick per poll interval.

    A stream ends after ``Admin.EventStreamMaxSeconds``; the browser reconnects (``retry:``) and is
    authorised again, so a revoked sign-in stops receiving events. Streams are capped per principal
    and per process (429)."""
    settings = request.app.state.chokaq.settings.admin
    interval = settings.event_poll_interval
    if after is None and last_event_id:
        try:
            after = float(last_event_id)
        except ValueError:
            after = None

    backlog = _since(after)
    if max_events is None and any(str(k).startswith("azure_functions.") for k in request.scope):
        # Azure Functions buffers the whole response: answer with what is buffered plus one tick.
        max_events = len(backlog) + 1
    hub = stream_hub(request)
    try:
        slot = hub.admit(f"{who.name} ({who.via})")
    except TooManyStreams as exc:
        raise StarletteHTTPException(429, str(exc), headers={"Retry-After": str(max(1, int(interval)))}) from None

    async def body() -> AsyncIterator[bytes]:
        queue = bus.subscribe()
        loop = asyncio.get_running_loop()
        ends = loop.time() + settings.event_stream_max_seconds
        sent = 0
        try:
            hub.attach(queue)
            yield f"retry: {int(interval * 1000)}\n\n".encode()
            for e in backlog:
                yield _sse(e.as_dict(), e.at)
                sent += 1
                if max_events is not None and sent >= max_events:
                    return
            while True:
                left = ends - loop.time()
                if left <= 0:
                    yield b": stream lifetime reached; reconnect\n\n"
                    return
                try:
                    e = await asyncio.wait_for(queue.get(), timeout=left)
                except TimeoutError:
                    continue
                if e.kind == "stats.unavailable":
                    yield b": stats unavailable\n\n"
                    continue
                yield _sse(e.as_dict(), None if e.kind == "stats.updated" else e.at)
                sent += 1
                if max_events is not None and sent >= max_events:
                    return
        finally:
            hub.detach(queue)
            bus.unsubscribe(queue)
            slot.release()

    return StreamingResponse(body(), media_type="text/event-stream", background=BackgroundTask(slot.release),
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.get("/recent", response_model=RecentEventsOut, responses=ERRORS)
def recent(
    who: Viewer,
    after: Annotated[float | None, Query(description="only events newer than this (the last poll's `now`)")] = None,
) -> RecentEventsOut:
    """Buffered bus events as JSON: the fallback where responses are buffered (Azure Functions)."""
    now = time.time()
    events = list(bus.recent) if after is None else _since(after)
    return RecentEventsOut(events=[EventOut(**e.as_dict()) for e in events], now=now)
