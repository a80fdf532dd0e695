"""The live-event streams of one process: admission (caps) and one shared stats poll.

Before this, each ``/api/events`` stream ran its own stats query every poll interval: 1,000
streams opened by one viewer were 500 queries a second and a pinned core. Now one task polls
while any stream is open and fans the snapshot out to every stream's queue, and a principal (and
the process) may hold only so many streams at once. The same task drives the event feed's
follower (feed_follower.py): a read per tick, and one at once when PostgreSQL's NOTIFY wakes it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool

from chokaq.api.feed_follower import FeedFollower
from chokaq.runtime.events import Event, offer

log = logging.getLogger("chokaq.api.events")


class TooManyStreams(Exception):
    pass


class Slot:
    """One admitted stream; ``release()`` is idempotent (called by the stream and after the response)."""

    def __init__(self, hub: StreamHub, key: str) -> None:
        self.hub, self.key, self.released = hub, key, False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.hub._release(self.key)


class StreamHub:
    def __init__(
        self,
        snapshot: Callable[[], dict[str, Any]],
        *,
        interval: float,
        max_total: int,
        max_per_principal: int,
        follower: FeedFollower | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.follower = follower
        self.interval = interval
        self.max_total = max_total
        self.max_per_principal = max_per_principal
        self._lock = threading.Lock()
        self._per: Counter[str] = Counter()
        self._subs: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue[Event]]] = []
        self._task: asyncio.Task[None] | None = None
        self._latest: Event | None = None
        self.polls = 0  # stats queries run (tests and diagnostics)

    # ------------------------------------------------------------------ admission
    def admit(self, key: str) -> Slot:
        with self._lock:
            if sum(self._per.values()) >= self.max_total:
                raise TooManyStreams(
                    f"this server already serves {self.max_total} event streams; retry later "
                    "(or poll /api/events/recent)"
                )
            if self._per[key] >= self.max_per_principal:
                raise TooManyStreams(f"{key} already holds {self.max_per_principal} event streams; close one first")
            self._per[key] += 1
        return Slot(self, key)

    def _release(self, key: str) -> None:
        with self._lock:
            self._per[key] -= 1
            if self._per[key] <= 0:
                del self._per[key]

    @property
    def open_streams(self) -> int:
        with self._lock:
            return sum(self._per.values())

    # ------------------------------------------------------------------ fan-out
    def attach(self, queue: asyncio.Queue[Event]) -> None:
        """Deliver stats ticks into ``queue`` (a bus subscription) from now on."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._subs.append((loop, queue))
            latest = self._latest
        if latest is not None:
            offer(queue, latest)  # a new stream shows numbers at once, without a query of its own
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._poll(), name="chokaq-stats-poll")

    def detach(self, queue: asyncio.Queue[Event]) -> None:
        with self._lock:
            self._subs = [(lp, q) for lp, q in self._subs if q is not queue]

    async def _poll(self) -> None:
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()
        if self.follower is not None:

            def wake() -> None:
                loop.call_soon_threadsafe(woken.set)

            self.follower.listen(wake)
        try:
            while True:
                with self._lock:
                    if not self._subs:
                        self._latest = None  # nobody watching: stop, and never show stale numbers later
                        return
                await self._follow()
                await self._stats()
                # Until the next tick; a NOTIFY of a feed row brings the feed's read forward.
                ends = loop.time() + self.interval
                while (left := ends - loop.time()) > 0:
                    try:
                        await asyncio.wait_for(woken.wait(), timeout=left)
                    except TimeoutError:
                        break
                    woken.clear()
                    await self._follow()
        finally:
            if self.follower is not None:
                self.follower.stop_listening()

    async def _follow(self) -> None:
        if self.follower is None:
            return
        try:
            await run_in_threadpool(self.follower.tick)
        except Exception as exc:  # the streams outlive a database blip
            log.warning("event feed read failed: %s", exc)

    async def _stats(self) -> None:
        try:
            self.polls += 1
            event = Event("stats.updated", await run_in_threadpool(self.snapshot))
        except Exception as exc:  # the streams outlive a database blip
            log.warning("stats tick failed: %s", exc)
            event = Event("stats.unavailable", {})
        with self._lock:
            self._latest = event if event.kind == "stats.updated" else None
            subs = list(self._subs)
        for loop, queue in subs:
            try:
                loop.call_soon_threadsafe(offer, queue, event)
            except RuntimeError:
                self.detach(queue)  # its loop is closed
