"""A serving process's follower of the event feed (chokaq/storage/event_feed.py): what other
processes did (a sweep's rescue, a worker's dead-letters, an operator's action through another
API or the CLI) onto this app's bus, so every stream and ``/api/events/recent`` hears of it.

It reads by cursor (the feed's id: one range read on the primary key per tick, cheap at any
table size) every ``Admin.EventPollInterval`` while streams are open, and at once when PostgreSQL's
NOTIFY says a row was committed. Rows this process's storage wrote are skipped: its bus already
carried those events. The stream hub drives it (stream_hub.py).
"""

from __future__ import annotations

import threading
from calendar import timegm
from collections import deque
from collections.abc import Callable, Iterable

from chokaq.runtime.events import EVENT_KINDS, Event, EventBus
from chokaq.storage import EventFeed, FeedRow

#: Ids a tick reads again below its cursor: on PostgreSQL a row can commit after a row with a
#: higher id (sequences are taken at insert), and must not be skipped for it.
LOOKBACK = 50
#: Rows one read returns; a follower further behind reads again at once.
READ_LIMIT = 500


def feed_event(row: FeedRow) -> Event | None:
    """The bus event of a feed row (None for a kind this version does not know)."""
    if row.kind not in EVENT_KINDS:
        return None
    at = timegm(row.at.timetuple()) + row.at.microsecond / 1e6
    return Event(row.kind, row.data, at, row.id)


def feed_events(rows: Iterable[FeedRow], skip_origin: str | None = None) -> list[Event]:
    out = []
    for row in rows:
        if skip_origin is not None and row.origin == skip_origin:
            continue
        event = feed_event(row)
        if event is not None:
            out.append(event)
    return out


class FeedFollower:
    def __init__(self, feed: EventFeed, bus: EventBus) -> None:
        self.feed, self.bus = feed, bus
        self.cursor: int | None = None  # None until the first tick: it starts at the feed's head
        self._seen: deque[int] = deque(maxlen=4 * LOOKBACK)
        self._lock = threading.Lock()
        self._listener: threading.Thread | None = None
        self._stop = threading.Event()
        self.listening = threading.Event()
        self.ticks = 0  # reads run (tests and diagnostics)

    def tick(self) -> int:
        """Read what is new and put other processes' events on the bus; how many were. Blocking
        (a database read): the hub runs it on a thread."""
        with self._lock:
            self.ticks += 1
            if self.cursor is None:
                self.cursor = self.feed.head()
                return 0
            delivered = 0
            while True:
                rows = self.feed.after(max(0, self.cursor - LOOKBACK), READ_LIMIT)
                fresh = [r for r in rows if r.id not in self._seen]
                self._seen.extend(r.id for r in fresh)
                if rows:
                    self.cursor = max(self.cursor, rows[-1].id)
                events = feed_events(fresh, self.feed.origin)
                self.bus.deliver(events)
                delivered += len(events)
                if len(rows) < READ_LIMIT:
                    return delivered

    def listen(self, wake: Callable[[], None]) -> bool:
        """Where the database can (PostgreSQL), a thread that calls ``wake`` after each commit
        that wrote feed rows; False where it cannot (the ticks alone then)."""
        if not self.feed.wakes or self._listener is not None:
            return self._listener is not None
        self._stop.clear()
        self._listener = threading.Thread(
            target=self.feed.listen, args=(wake, self._stop, self.listening), name="chokaq-events-listen", daemon=True
        )
        self._listener.start()
        return True

    def stop_listening(self) -> None:
        self._stop.set()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.join(timeout=2)
