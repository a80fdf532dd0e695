"""The Deck's and the API's per-queue sizes and top error groups at a cost that does not grow with
the tables (docs/admin-figures.md).

A table of at most ``exact_limit`` rows is counted on every read: exact and cheap. A larger one is
counted in full at most every ``max_age`` seconds per process, and never more often than keeps the
counting under ``duty`` of one connection's time (a count that takes 1 s is reused for 50 s at 2%);
in between, reads serve the last count with its time. The running totals (succeeded, failed,
retried) stay exact on every read: they are StatsSummary's counters, one row per queue.

Why not counters maintained by the moves: Pending enters JobsHot by enqueue, which touches no counter
row, and a per-queue counter that every enqueue and claim updated would be one hot row every
transaction of a queue locks. Why not the planner's estimates: they exist per table, not per queue
and state, on PostgreSQL only, and can be days old after a burst.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection

from chokaq.domain.models import QueueStats
from chokaq.storage.queue_figures import HotCounts, assemble, capped_count, count_dlq, count_hot, top_error_groups
from chokaq.storage.schema import jobs_dlq, jobs_hot
from chokaq.storage.store import Storage

T = TypeVar("T")
TOP_ERRORS = 10


@dataclass(frozen=True)
class Figures:
    queues: list[QueueStats]
    top_errors: list[dict[str, Any]]
    hot_exact: bool  # Pending/Fetched/Processing counted by this read
    dlq_exact: bool  # DLQ sizes and top errors counted by this read
    counted_at_utc: datetime  # when the oldest count served was taken (now when both are exact)
    age_seconds: float


@dataclass(frozen=True)
class _Count(Generic[T]):
    value: T
    at_utc: datetime
    taken: float  # monotonic clock
    cost: float  # seconds the count took


class _Reused(Generic[T]):
    """One table's last full count, recounted by one caller at a time when it is due."""

    def __init__(self, count: Callable[[Connection], T]) -> None:
        self.count = count
        self.lock = threading.Lock()
        self.last: _Count[T] | None = None

    def due(self, last: _Count[T] | None, now: float, max_age: float, duty: float) -> bool:
        return last is None or now - last.taken >= max(max_age, last.cost / duty)

    def get(
        self, c: Connection, db_now: datetime, *, max_age: float, duty: float, clock: Callable[[], float]
    ) -> _Count[T]:
        last = self.last
        if last is not None and not self.due(last, clock(), max_age, duty):
            return last
        # Another caller is counting: serve the last count rather than count twice. Only the very
        # first read waits, since it has nothing to serve.
        if not self.lock.acquire(blocking=last is None):
            assert last is not None
            return last
        try:
            last = self.last
            if last is not None and not self.due(last, clock(), max_age, duty):
                return last
            started = clock()
            value = self.count(c)
            done = clock()
            self.last = _Count(value, db_now, done, done - started)
            return self.last
        finally:
            self.lock.release()


def _count_dlq_and_top(c: Connection) -> tuple[dict[str, int], list[dict[str, Any]]]:
    return count_dlq(c), top_error_groups(c, TOP_ERRORS)


class FiguresCache:
    """One per process (the API's): shared by ``GET /api/stats`` and every live stream's tick."""

    def __init__(
        self,
        storage: Storage,
        *,
        exact_limit: int,
        max_age: float,
        duty: float = 0.02,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.storage, self.exact_limit, self.max_age, self.duty, self.clock = storage, exact_limit, max_age, duty, clock
        self._hot: _Reused[HotCounts] = _Reused(count_hot)
        self._dlq: _Reused[tuple[dict[str, int], list[dict[str, Any]]]] = _Reused(_count_dlq_and_top)

    def read(self) -> Figures:
        return self.storage.read(self._read, op="queue_figures")

    def _read(self, c: Connection) -> Figures:
        now = self.storage.db_now(c)
        stamps: list[_Count[Any]] = []
        hot_exact = capped_count(c, jobs_hot, self.exact_limit) <= self.exact_limit
        if hot_exact:
            hot = count_hot(c)
        else:
            got_hot = self._hot.get(c, now, max_age=self.max_age, duty=self.duty, clock=self.clock)
            hot = got_hot.value
            stamps.append(got_hot)
        dlq_exact = capped_count(c, jobs_dlq, self.exact_limit) <= self.exact_limit
        if dlq_exact:
            dlq, top = count_dlq(c), top_error_groups(c, TOP_ERRORS)
        else:
            got_dlq = self._dlq.get(c, now, max_age=self.max_age, duty=self.duty, clock=self.clock)
            dlq, top = got_dlq.value
            stamps.append(got_dlq)
        oldest = min(stamps, key=lambda s: s.taken) if stamps else None
        return Figures(
            queues=assemble(c, hot, dlq, now),
            top_errors=top,
            hot_exact=hot_exact,
            dlq_exact=dlq_exact,
            counted_at_utc=oldest.at_utc if oldest else now,
            age_seconds=max(0.0, self.clock() - oldest.taken) if oldest else 0.0,
        )
