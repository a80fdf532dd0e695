"""The in-process event bus. Events are hints for dashboards to reload; the database is the truth.

Each :class:`~chokaq.runtime.app.ChokaQ` app owns one bus (``app.bus``): two apps in one process
(two databases, or a test beside the app under test) never see each other's events. What
publishes to it is what runs in that app's process: the admin API's operator actions (through
:mod:`chokaq.operations.service`), the app's workers and its sweeps. What other processes do
(a sweep, a worker container, a CLI resurrect) reaches a serving process through the event feed
in the database (chokaq/storage/event_feed.py), which its follower (chokaq/api/feed_follower.py)
puts on this bus, each event with its row's id (``feed_id``).
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
    "dlq.batch",  # (from the feed) a worker's batch of dead-letters of one reason
    "audit",  # (from the feed) an operator's or the system's audited action
    "schedule.fired",  # (from the feed) a schedule enqueued its due slots' jobs
]
EVENT_KINDS: Final[tuple[EventKind, ...]] = get_args(EventKind)

# Only between the stream hub and its streams: a stats poll failed. Never sent to a client.
StatsUnavailable = Literal["stats.unavailable"]


@dataclass(frozen=True, slots=True)
class Event:
    kind: EventKind | StatsUnavailable
    data: dict[str, Any]
    at: float = field(default_factory=time.time)
    #: The event feed row it came from (its cursor); None for an event of this process's own.
    feed_id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {"kind": self.kind, "at": self.at, **self.data}
        if self.feed_id is not None:
            out["feed_id"] = self.feed_id
        return out


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

    def deliver(self, events: list[Event]) -> None:
        """Events made elsewhere (the feed follower's), as they are."""
        if events:
            self._deliver(events)

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
