"""Test-only helpers that reach into the tables (product code keeps SQL in chokaq.storage)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

from sqlalchemy import func, select, update

from chokaq.storage import Storage
from chokaq.storage.schema import jobs_archive, jobs_dlq, jobs_hot, stats_summary

T = TypeVar("T")


def age(storage: Storage, job_id: str, seconds: float, *, heartbeat: bool = True) -> None:
    """Pretend the job's last heartbeat/update happened ``seconds`` ago (no sleeping in tests)."""

    def work(c):  # type: ignore[no-untyped-def]
        past = storage.db_now(c) - timedelta(seconds=seconds)
        values = {"LastUpdatedUtc": past}
        if heartbeat:
            values["HeartbeatUtc"] = past
        c.execute(update(jobs_hot).where(jobs_hot.c.Id == job_id).values(**values))

    storage.write(work)


def counts(storage: Storage) -> dict[str, int]:
    def work(c):  # type: ignore[no-untyped-def]
        out = {}
        for status, n in c.execute(select(jobs_hot.c.Status, func.count()).group_by(jobs_hot.c.Status)).all():
            out[["pending", "fetched", "processing"][status]] = n
        out["archive"] = c.execute(select(func.count()).select_from(jobs_archive)).scalar_one()
        out["dlq"] = c.execute(select(func.count()).select_from(jobs_dlq)).scalar_one()
        return out

    return storage.read(work)


def totals(storage: Storage, queue: str = "default") -> tuple[int, int, int]:
    def work(c):  # type: ignore[no-untyped-def]
        row = c.execute(select(stats_summary).where(stats_summary.c.Queue == queue)).first()
        return (row.SucceededTotal, row.FailedTotal, row.RetriedTotal) if row else (0, 0, 0)

    return storage.read(work)


def wait_for(predicate: Callable[[], T], timeout: float = 20.0, interval: float = 0.02) -> T:
    """Poll until ``predicate`` returns something truthy; fail with a clear message at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)
