"""Live events for the Deck: Server-Sent Events, and a JSON polling fallback.

Events are hints to reload; the database is the truth. This process's bus carries what happens
here (edits, resurrects, worker outcomes, zombie rescues run in this process). Work done by
other processes shows up through the ``stats.updated`` tick, computed from the database every
``Admin.EventPollInterval`` seconds.

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
from starlette.concurrency import run_in_threadpool

from chokaq.api.common import ERRORS, Viewer, chokaq_app
from chokaq.api.models import EventOut, RecentEventsOut
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


def stats_snapshot(request: Request) -> dict[str, Any]:
    rows = chokaq_app(request).storage.queue_stats()
    keys = ("pending", "fetched", "processing", "succeeded_total", "failed_total", "retried_total", "dlq_size")
    totals = {k: sum(getattr(r, k) for r in rows) for k in keys}
    queues = {r.queue: {k: getattr(r, k) for k in keys} for r in rows}
    return {"kind": "stats.updated", "at": time.time(), "totals": totals, "queues": queues}


@router.get("", responses={**ERRORS, 200: {"content": {"text/event-stream": {}}, "description": "event stream"}})
async def stream(
    request: Request,
    who: Viewer,
    after: Annotated[float | None, Query(description="replay buffered events newer than this time")] = None,
    max_events: Annotated[int | None, Query(ge=1, le=10_000, description="close after this many")] = None,
    last_event_id: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> StreamingResponse:
    """Server-Sent Events: bus events as they happen plus a ``stats.updated`` tick per poll interval."""
    interval = request.app.state.chokaq.settings.admin.event_poll_interval
    if after is None and last_event_id:
        try:
            after = float(last_event_id)
        except ValueError:
            after = None

    backlog = _since(after)
    if max_events is None and any(str(k).startswith("azure_functions.") for k in request.scope):
        # Azure Functions buffers the whole response: answer with what is buffered plus one tick.
        max_events = len(backlog) + 1

    async def body() -> AsyncIterator[bytes]:
        queue = bus.subscribe()
        sent = 0
        loop = asyncio.get_running_loop()
        try:
            yield f"retry: {int(interval * 1000)}\n\n".encode()
            for e in backlog:
                yield _sse(e.as_dict(), e.at)
                sent += 1
                if max_events is not None and sent >= max_events:
                    return
            next_tick = loop.time()
            while True:
                wait = next_tick - loop.time()
                if wait <= 0:
                    next_tick = loop.time() + interval
                    try:
                        snap = await run_in_threadpool(stats_snapshot, request)
                    except Exception as exc:  # the stream outlives a database blip
                        log.warning("stats tick failed: %s", exc)
                        yield b": stats unavailable\n\n"
                        continue
                    yield _sse(snap)
                else:
                    try:
                        e = await asyncio.wait_for(queue.get(), timeout=wait)
                    except TimeoutError:
                        continue
                    yield _sse(e.as_dict(), e.at)
                sent += 1
                if max_events is not None and sent >= max_events:
                    return
        finally:
            bus.unsubscribe(queue)

    return StreamingResponse(body(), media_type="text/event-stream",
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
