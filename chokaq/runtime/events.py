"""The in-process event bus. Events are hints for dashboards to reload; the database is the truth.

Each :class:`~chokaq.runtime.app.ChokaQ` app owns one bus (``app.bus``): two apps in one process
(two databases, or a test beside the app under test) never see each other's events. What
publishes to it is what runs in that app's process: the admin API's operator actions (through
:mod:`chokaq.operations.service`), the app's workers and its sweeps. A process with no subscriber
(a CLI command) has nobody to tell, so it does not publish; the Deck learns of such changes from
the database, on its next ``stats.updated`` tick or reload.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

EventKind = Literal[
    "job.updated",  # enqueued, edited, retried (back to Pending)
    "job.archived",  # succeeded
    "job.failed",  # dead-lettered (failed, cancelled)
    "job.resurrected",  # DLQ -> Pending
    "job.purged",  # deleted from the DLQ or the archive
    "queue.changed",  # paused, limits, zombie timeout
    "stats.updated",  # the stream hub's periodic counts
    "zombie.rescue",  # a sweep moved abandoned or silent jobs
    "breaker.changed",  # a job type's circuit breaker opened, went half-open or closed
]
EVENT_KINDS: Final[tuple[EventKind, ...]] = get_args(EventKind)

# Only between the stream hub and its streams: a stats poll failed. Never sent to a client.
StatsUnavailable = Literal["stats.unavailable"]


@dataclass(frozen=True, slots=True)
class Event:
    kind: EventKind | StatsUnavailable
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

    def publish(self, kind: EventKind, **data: Any) -> Event:
        event = Event(kind, data)
        self._deliver([event])
        return event

    def publish_many(self, kind: EventKind, items: list[dict[str, Any]]) -> None:
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

    def since(self, after: float) -> list[Event]:
        """Buffered events newer than ``after`` (a reconnecting stream's replay)."""
        with self._lock:
            return [e for e in self.recent if e.at > after]

    def subscribe(self, maxsize: int = 1000) -> asyncio.Queue[Event]:
        queue: asyncio.Queue[Event] = asyncio.Queue(maxsize=maxsize)
        with self._lock:
            self._subs.append((asyncio.get_running_loop(), queue))
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Event]) -> None:
        with self._lock:
            self._subs = [(lp, q) for lp, q in self._subs if q is not queue]


def offer(queue: asyncio.Queue[Event], event: Event) -> None:
    """Put ``event`` on a subscriber's queue; a slow client loses the oldest hints, never blocks the publisher."""
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(event)


def _offer_all(queue: asyncio.Queue[Event], events: list[Event]) -> None:
    for event in events:
        offer(queue, event)
