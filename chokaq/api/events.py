"""Live events for the Deck: Server-Sent Events, and a JSON polling fallback.

Events are hints to reload; the database is the truth. The served app's bus (``app.bus``) carries
what that app does in this process (edits, resurrects, worker outcomes, zombie rescues run here).
What other processes do reaches it through the event feed (chokaq/storage/event_feed.py), read by
cursor by the feed follower (:mod:`chokaq.api.feed_follower`) that the one shared poll of all
streams drives (:mod:`chokaq.api.stream_hub`), with the ``stats.updated`` tick every
``Admin.EventPollInterval`` seconds.

Each SSE message is unnamed (``data:`` only, so ``EventSource.onmessage`` receives all of them);
the JSON carries ``kind``. The ``id:`` is the feed's cursor (the row's id for a feed event, the
follower's position for this process's own), so a reconnecting browser's ``Last-Event-ID``
replays what it missed from the feed, whichever process wrote it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from chokaq.api.common import ERRORS, Viewer, chokaq_app, figures
from chokaq.api.feed_follower import FeedFollower, feed_events
from chokaq.api.models import ErrorOut, EventOut, RecentEventsOut, figures_out
from chokaq.api.stream_hub import Slot, StreamHub, TooManyStreams
from chokaq.runtime.events import Event, EventBus
from chokaq.storage import EventFeed, FiguresCache

log = logging.getLogger("chokaq.api.events")
router = APIRouter(prefix="/api/events", tags=["events"])


#: Feed rows a reconnecting stream or a first poll replays at most.
REPLAY_MAX = 500


def _sse(data: dict[str, Any], event_id: int | float | None = None) -> bytes:
    head = f"id: {event_id!r}\n" if event_id is not None else ""
    return f"{head}data: {json.dumps(data, default=str, separators=(',', ':'))}\n\n".encode()


def event_bus(request: Request) -> EventBus:
    """The bus of the app this API serves (never another app's in the same process)."""
    return chokaq_app(request).bus


def _backlog(bus: EventBus, feed: EventFeed, after: float | None, last_event_id: str | None) -> list[Event]:
    """What a (re)connecting stream missed: ``?after=`` (a time) from this process's buffer; else a
    ``Last-Event-ID`` that is a feed cursor replays the feed after it, every process's rows."""
    if after is not None:
        return bus.since(after)
    if not last_event_id:
        return []
    try:
        cursor = int(last_event_id)
    except ValueError:
        try:
            return bus.since(float(last_event_id))  # an event time, from before the feed
        except ValueError:
            return []
    return feed_events(feed.after(max(0, cursor), REPLAY_MAX))


def event_feed(request: Request) -> EventFeed:
    return EventFeed(chokaq_app(request).storage)


def stats_snapshot(cache: FiguresCache) -> dict[str, Any]:
    """The tick's numbers: the figures cache's, so a tick costs the same at a million dead jobs."""
    f = cache.read()
    keys = ("pending", "fetched", "processing", "succeeded_total", "failed_total", "retried_total", "dlq_size")
    totals = {k: sum(getattr(r, k) for r in f.queues) for k in keys}
    queues = {r.queue: {k: getattr(r, k) for k in keys} for r in f.queues}
    return {"totals": totals, "queues": queues, "figures": figures_out(f).model_dump()}


def stream_hub(request: Request) -> StreamHub:
    hub: StreamHub | None = getattr(request.app.state, "stream_hub", None)
    if hub is None:
        admin = chokaq_app(request).settings.admin
        cache = figures(request)
        follower = FeedFollower(event_feed(request), event_bus(request))
        hub = request.app.state.stream_hub = StreamHub(
            lambda: stats_snapshot(cache),
            interval=admin.event_poll_interval,
            max_total=admin.max_event_streams,
            max_per_principal=admin.max_event_streams_per_principal,
            follower=follower,
        )
    return hub


class _Stream:
    """One admitted stream: the backlog, then live events and ticks, until its lifetime or
    ``max_events`` ends it. Subscribes when the response starts and always lets go."""

    def __init__(
        self,
        bus: EventBus,
        hub: StreamHub,
        slot: Slot,
        backlog: list[Event],
        *,
        interval: float,
        lifetime: float,
        max_events: int | None,
    ) -> None:
        self.bus, self.hub, self.slot, self.backlog = bus, hub, slot, backlog
        self.interval, self.lifetime, self.max_events = interval, lifetime, max_events
        self.sent = 0

    def _counted(self, data: bytes) -> bytes:
        self.sent += 1
        return data

    def _id(self, e: Event) -> int | None:
        """The SSE id: the feed row's, else the follower's position (what a reconnect resumes after)."""
        if e.feed_id is not None:
            return e.feed_id
        return self.hub.follower.cursor if self.hub.follower is not None else None

    def _full(self) -> bool:
        return self.max_events is not None and self.sent >= self.max_events

    async def body(self) -> AsyncIterator[bytes]:
        queue = self.bus.subscribe()
        try:
            self.hub.attach(queue)
            yield f"retry: {int(self.interval * 1000)}\n\n".encode()
            for e in self.backlog:
                yield self._counted(_sse(e.as_dict(), self._id(e)))
                if self._full():
                    return
            async with contextlib.aclosing(self._live(queue)) as live:
                async for chunk in live:
                    yield chunk
                    if self._full():
                        return
        finally:
            self.hub.detach(queue)
            self.bus.unsubscribe(queue)
            self.slot.release()

    async def _live(self, queue: asyncio.Queue[Event]) -> AsyncGenerator[bytes, None]:
        loop = asyncio.get_running_loop()
        ends = loop.time() + self.lifetime
        while (left := ends - loop.time()) > 0:
            try:
                e = await asyncio.wait_for(queue.get(), timeout=left)
            except TimeoutError:
                continue
            if e.kind == "stats.unavailable":
                yield b": stats unavailable\n\n"
                continue
            yield self._counted(_sse(e.as_dict(), None if e.kind == "stats.updated" else self._id(e)))
        yield b": stream lifetime reached; reconnect\n\n"


@router.get(
    "",
    responses={
        **ERRORS,
        200: {"content": {"text/event-stream": {}}, "description": "event stream"},
        429: {"model": ErrorOut, "description": "too many open streams"},
    },
)
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
    settings = chokaq_app(request).settings.admin
    interval = settings.event_poll_interval
    bus = event_bus(request)
    backlog = await run_in_threadpool(_backlog, bus, event_feed(request), after, last_event_id)
    if max_events is None and any(str(k).startswith("azure_functions.") for k in request.scope):
        # Azure Functions buffers the whole response: answer with what is buffered plus one tick.
        max_events = len(backlog) + 1
    hub = stream_hub(request)
    if hub.follower is not None and hub.follower.cursor is None:
        # The follower's start (the feed's head) before this stream opens: what any process
        # writes from the moment the browser sees the stream open reaches it.
        await run_in_threadpool(hub.follower.tick)
    try:
        slot = hub.admit(f"{who.name} ({who.via})")
    except TooManyStreams as exc:
        raise StarletteHTTPException(429, str(exc), headers={"Retry-After": str(max(1, int(interval)))}) from None
    events = _Stream(
        bus, hub, slot, backlog, interval=interval, lifetime=settings.event_stream_max_seconds, max_events=max_events
    )
    return StreamingResponse(
        events.body(),
        media_type="text/event-stream",
        background=BackgroundTask(slot.release),
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get("/recent", response_model=RecentEventsOut, responses=ERRORS)
def recent(
    request: Request,
    who: Viewer,
    after: Annotated[float | None, Query(description="only events newer than this (the last poll's `now`)")] = None,
    cursor: Annotated[
        int | None, Query(ge=0, description="only feed events after this id (the last poll's `cursor`)")
    ] = None,
) -> RecentEventsOut:
    """This process's buffered bus events and every other process's from the event feed, as JSON:
    the fallback where responses are buffered (Azure Functions)."""
    now = time.time()
    bus = event_bus(request)
    feed = event_feed(request)
    # The bus's own events only: what the follower put on it comes from the feed read below.
    mine = [e for e in (list(bus.recent) if after is None else bus.since(after)) if e.feed_id is None]
    rows = feed.latest(REPLAY_MAX) if cursor is None else feed.after(cursor, REPLAY_MAX)
    head = max([cursor or 0, *(r.id for r in rows)])
    events = sorted([*mine, *feed_events(rows, feed.origin)], key=lambda e: e.at)
    return RecentEventsOut(events=[EventOut(**e.as_dict()) for e in events], now=now, cursor=head)
