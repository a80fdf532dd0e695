"""In-process event bus. Events are hints for dashboards to reload; the database is the truth."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Event:
    kind: str  # job.updated, job.archived, job.failed, job.resurrected, job.purged, queue.changed,
    # stats.updated, zombie.rescue
    data: dict[str, Any]
    at: float = field(default_factory=time.time)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "at": self.at, **self.data}


class EventBus:
    """Fan-out to asyncio subscribers; publish is safe from any thread."""

    def __init__(self, history: int = 200) -> None:
        self._lock = threading.Lock()
        self._subs: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue[Event]]] = []
        self.recent: deque[Event] = deque(maxlen=history)

    def publish(self, kind: str, **data: Any) -> Event:
        event = Event(kind, data)
        self._deliver([event])
        return event

    def publish_many(self, kind: str, items: list[dict[str, Any]]) -> None:
        """Events of one kind at once (one lock, one hand-off per subscriber instead of one per
        event): subscribers see the same events, in the same order, as from a publish each."""
        if items:
            at = time.time()
            self._deliver([Event(kind, data, at) for data in items])

    def _deliver(self, events: list[Event]) -> None:
        with self._lock:
            self.recent.extend(events)
            subs = list(self._subs)
        for loop, queue in subs:
            try:
                loop.call_soon_threadsafe(_offer_all, queue, events)
            except RuntimeError:
                self.unsubscribe(queue)  # its loop is closed

    def subscribe(self, maxsize: int = 1000) -> asyncio.Queue[Event]:
        queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=maxsize)
        with self._lock:
            self._subs.append((asyncio.get_running_loop(), queue))
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Event]) -> None:
        with self._lock:
            self._subs = [(lp, q) for lp, q in self._subs if q is not queue]


def _offer(queue: asyncio.Queue[Event], event: Event) -> None:
    if queue.full():  # a slow client loses the oldest hints, never blocks the publisher
        queue.get_nowait()
    queue.put_nowait(event)


def _offer_all(queue: asyncio.Queue[Event], events: list[Event]) -> None:
    for event in events:
        _offer(queue, event)


bus = EventBus()
