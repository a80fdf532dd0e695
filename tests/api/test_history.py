"""GET /api/stats/history on SQLite and PostgreSQL: rows placed at known finish and fail times
land in the bucket holding them, reasons split, waits and run times summarised per bucket."""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import insert

from chokaq import ChokaQ
from chokaq.domain.states import FailureReason
from chokaq.storage.schema import jobs_archive, jobs_dlq
from tests.api.helpers import HEADERS

VIEWER = HEADERS["viewer"]
_ids = itertools.count()


def _parse(s: str) -> datetime:
    return datetime.fromisoformat(s.removesuffix("Z"))


def archived(
    at: datetime, *, queue: str = "default", wait_ms: float | None = 100.0, duration_ms: int | None = 10
) -> dict[str, Any]:
    started = None if wait_ms is None else at - timedelta(milliseconds=duration_ms or 0)
    created = (started or at) - timedelta(milliseconds=wait_ms or 0)
    return {
        "Id": f"H{next(_ids):025d}",
        "Queue": queue,
        "Type": "t",
        "Payload": "{}",
        "AttemptCount": 1,
        "CreatedAtUtc": created,
        "StartedAtUtc": started,
        "FinishedAtUtc": at,
        "DurationMs": duration_ms,
    }


def dead(at: datetime, reason: FailureReason, *, queue: str = "default") -> dict[str, Any]:
    return {
        "Id": f"D{next(_ids):025d}",
        "Queue": queue,
        "Type": "t",
        "Payload": "{}",
        "AttemptCount": 1,
        "FailureReason": int(reason),
        "CreatedAtUtc": at - timedelta(seconds=5),
        "FailedAtUtc": at,
    }


def seed(app: ChokaQ, archive: list[dict[str, Any]], dlq: list[dict[str, Any]]) -> None:
    with app.storage.engine.begin() as c:
        if archive:
            c.execute(insert(jobs_archive), archive)
        if dlq:
            c.execute(insert(jobs_dlq), dlq)


def by_start(body: dict[str, Any]) -> dict[datetime, dict[str, Any]]:
    return {_parse(b["start_utc"]): b for b in body["buckets"]}


def test_bucket_counts_equal_the_rows_placed_in_each_bucket(app: ChokaQ, client: TestClient) -> None:
    first = client.get("/api/stats/history", params={"window": "1h"}, headers=VIEWER).json()
    size = first["bucket_seconds"]
    assert size == 60 and len(first["buckets"]) == 60
    start = _parse(first["start_utc"])
    edge = lambda i: start + timedelta(seconds=size * i)  # noqa: E731
    # Buckets 10..40: far from both ends, so a minute rolling over between the two requests
    # cannot push a seeded row out of the window. Expectations are keyed by bucket start time.
    archive = (
        [archived(edge(10)) for _ in range(3)]  # exactly on the bucket's first instant
        + [archived(edge(11) - timedelta(milliseconds=1))]  # the last millisecond of bucket 10
        + [archived(edge(20) + timedelta(seconds=30)) for _ in range(5)]
        + [archived(edge(30) + timedelta(seconds=1), queue="other") for _ in range(2)]
    )
    dlq = (
        [dead(edge(20) + timedelta(seconds=2), FailureReason.ZOMBIE) for _ in range(4)]
        + [dead(edge(20) + timedelta(seconds=50), FailureReason.MAX_RETRIES_EXCEEDED)]
        + [dead(edge(35), FailureReason.FATAL_ERROR, queue="other")]
        + [dead(start - timedelta(hours=2), FailureReason.ZOMBIE)]  # before the window
    )
    seed(app, archive, dlq)
    body = client.get("/api/stats/history", params={"window": "1h"}, headers=VIEWER).json()
    got = by_start(body)
    succeeded = Counter(_parse(b["start_utc"]) for b in body["buckets"] for _ in range(b["succeeded"]))
    assert succeeded == Counter({edge(10): 4, edge(20): 5, edge(30): 2})
    assert got[edge(20)]["failed"] == {"Zombie": 4, "MaxRetriesExceeded": 1}
    assert got[edge(20)]["failed_total"] == 5
    assert got[edge(35)]["failed"] == {"FatalError": 1}
    assert sum(b["failed_total"] for b in body["buckets"]) == 6  # the old zombie is outside
    assert got[edge(10)]["mean_duration_ms"] == 10
    assert "Zombie" in body["reasons"] and body["wait_basis"] == "started_minus_due"
    assert body["archive_oldest_utc"] is not None

    only = client.get("/api/stats/history", params={"window": "1h", "queue": "other"}, headers=VIEWER).json()
    got = by_start(only)
    assert sum(b["succeeded"] for b in only["buckets"]) == 2 and got[edge(30)]["succeeded"] == 2
    assert sum(b["failed_total"] for b in only["buckets"]) == 1 and got[edge(35)]["failed"] == {"FatalError": 1}


def test_wait_percentiles_and_mean_duration_per_bucket(app: ChokaQ, client: TestClient) -> None:
    first = client.get("/api/stats/history", params={"window": "6h"}, headers=VIEWER).json()
    size = first["bucket_seconds"]
    assert size == 300 and len(first["buckets"]) == 72
    at = _parse(first["start_utc"]) + timedelta(seconds=size * 30 + 10)
    # 18 jobs waited 150 ms and 2 waited 40 s: p50 is in the bin [100, 158) ms, p95 in [39.8, 63.1) s
    # (five log-uniform bins per decade).
    rows = [archived(at, wait_ms=150, duration_ms=20) for _ in range(18)]
    rows += [archived(at, wait_ms=40_000, duration_ms=200) for _ in range(2)]
    rows += [archived(at, wait_ms=None, duration_ms=None)]  # never started (no wait, no run time)
    seed(app, rows, [])
    body = client.get("/api/stats/history", params={"window": "6h"}, headers=VIEWER).json()
    span = timedelta(seconds=size)
    b = next(b for b in body["buckets"] if _parse(b["start_utc"]) <= at < _parse(b["start_utc"]) + span)
    assert b["succeeded"] == 21 and b["waits_measured"] == 20
    assert 100 <= b["wait_p50_ms"] <= 10**2.2
    assert 10**4.6 <= b["wait_p95_ms"] <= 10**4.8
    assert b["mean_duration_ms"] == (18 * 20 + 2 * 200) / 20
    others = [x for x in body["buckets"] if x is not b]
    assert all(x["wait_p50_ms"] is None and x["succeeded"] == 0 for x in others)


def test_wait_runs_from_the_due_time_not_the_enqueue_time(app: ChokaQ, client: TestClient) -> None:
    """A job delayed by a minute that started 150 ms after it fell due waited 150 ms, not 60 s."""
    first = client.get("/api/stats/history", params={"window": "6h"}, headers=VIEWER).json()
    size = first["bucket_seconds"]
    at = _parse(first["start_utc"]) + timedelta(seconds=size * 30 + 10)
    rows = []
    for _ in range(10):
        row = archived(at, wait_ms=60_150, duration_ms=20)  # enqueued 60.15 s before it started
        row["ScheduledAtUtc"] = row["StartedAtUtc"] - timedelta(milliseconds=150)  # due 150 ms before
        rows.append(row)
    seed(app, rows, [])
    body = client.get("/api/stats/history", params={"window": "6h"}, headers=VIEWER).json()
    span = timedelta(seconds=size)
    b = next(b for b in body["buckets"] if _parse(b["start_utc"]) <= at < _parse(b["start_utc"]) + span)
    assert b["waits_measured"] == 10
    assert 100 <= b["wait_p50_ms"] <= 10**2.2 and b["wait_p95_ms"] <= 10**2.2


def test_an_empty_window_gives_zero_buckets_not_an_error(client: TestClient) -> None:
    for window, size, count in (("1h", 60, 60), ("6h", 300, 72), ("24h", 900, 96), ("7d", 3600, 168)):
        r = client.get("/api/stats/history", params={"window": window}, headers=VIEWER)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["bucket_seconds"] == size and len(body["buckets"]) == count
        assert all(b["succeeded"] == 0 and b["failed"] == {} and b["wait_p50_ms"] is None for b in body["buckets"])
        starts = [_parse(b["start_utc"]) for b in body["buckets"]]
        assert all(int(s.timestamp()) % size == 0 for s in starts)
        assert starts == sorted(starts) and _parse(body["end_utc"]) == starts[-1] + timedelta(seconds=size)
        assert body["archive_oldest_utc"] is None


def test_bad_window_is_422_and_viewers_may_read(client: TestClient) -> None:
    r = client.get("/api/stats/history", params={"window": "2h"}, headers=VIEWER)
    assert r.status_code == 422 and r.json()["error"] == "validation_error"
    assert client.get("/api/stats/history", params={"window": "1h"}).status_code == 401
    assert client.get("/api/stats/history", params={"queue": "a\x00b"}, headers=VIEWER).status_code == 422
