"""The figures the Deck and /api/stats serve (storage/figures_cache.py) equal a full count after a
mixed run, whether the tables are counted on every read or their counts are reused; a reused count
is said to be one, with its age, and is taken again only when due, by one caller."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from chokaq import ChokaQ, JobContext
from chokaq.domain.states import FailureReason, Location
from chokaq.storage import Actor
from chokaq.storage.admin import AdminStore
from chokaq.storage.admin_types import JobFilter
from chokaq.storage.figures_cache import FiguresCache
from chokaq.storage.queue_figures import read_queue_stats
from tests.api.helpers import enqueue, make_app, make_dead, run_worker_until

OPS = Actor("ops@example.com", "operator")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def app(db_url: str) -> Iterator[ChokaQ]:
    a = make_app(db_url, retry={"max_attempts": 2, "base_delay": 0, "jitter_max_delay": 0})
    try:
        yield a
    finally:
        a.close()


def full_count(app: ChokaQ) -> Any:
    return app.storage.read(lambda c: read_queue_stats(c, app.storage.db_now(c)))


def comparable(rows: Any) -> list[tuple[Any, ...]]:
    # The lag is measured against each read's own clock: compare that it is there, not its value.
    return [
        (
            r.queue,
            r.pending,
            r.fetched,
            r.processing,
            r.succeeded_total,
            r.failed_total,
            r.retried_total,
            r.dlq_size,
            r.oldest_pending_lag_seconds is None,
        )
        for r in rows
    ]


def sizes(rows: Any) -> list[tuple[Any, ...]]:
    return [(r.queue, r.pending, r.fetched, r.processing, r.dlq_size) for r in rows]


def totals(rows: Any) -> list[tuple[Any, ...]]:
    return [(r.queue, r.succeeded_total, r.failed_total, r.retried_total) for r in rows]


def mixed_run(app: ChokaQ) -> None:
    """Successes, retries, dead letters by the worker; cancels, resurrects, purges by an operator; a
    sweep; jobs left Pending, Fetched and Processing."""

    @app.job("ok", queue="mail")
    async def ok(payload: dict[str, Any], ctx: JobContext) -> None:
        return None

    @app.job("bad", queue="mail")
    async def bad(payload: dict[str, Any], ctx: JobContext) -> None:
        raise RuntimeError("upstream 421 refused")

    @app.job("flaky", queue="billing")
    async def flaky(payload: dict[str, Any], ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("first try fails")

    ids = [app.enqueue("ok", {}) for _ in range(12)] + [app.enqueue("bad", {}) for _ in range(6)]
    ids += [app.enqueue("flaky", {}) for _ in range(5)]

    def settled() -> bool:
        return all((j := app.storage.get_job(i)) is not None and j.location is not Location.HOT for i in ids)

    run_worker_until(app, settled, timeout=60)
    admin = AdminStore(app.storage)
    make_dead(app.storage, 7, type="boom", queue="billing", reason=FailureReason.TIMEOUT)
    pending = [enqueue(app.storage, type="later", queue="mail") for _ in range(9)]
    admin.cancel(pending[:3], OPS)
    dead = admin.list_jobs(Location.DLQ, JobFilter(type="bad")).items
    admin.resurrect_many(OPS, ids=[j.id for j in dead[:2]])
    admin.purge_dlq(OPS, ids=[j.id for j in dead[2:4]])
    boom = JobFilter(type="boom", queue="billing")
    preview = admin.purge_dlq(OPS, f=boom, dry_run=True)
    admin.purge_dlq(OPS, f=boom, expected_count=preview.matched, snapshot=preview.snapshot)
    # Left Fetched (claimed, never started) and Processing (started, never finished); a sweep
    # with long timeouts finds nothing to move yet still runs its statements.
    enqueue(app.storage, type="held", queue="ops")
    enqueue(app.storage, type="held", queue="ops")
    claimed = app.storage.fetch("w-held", 10, ["ops"])
    app.storage.start("w-held", claimed[:1])
    app.storage.sweep(fetched_timeout=3600, zombie_timeout=3600, max_attempts=3)


@pytest.mark.parametrize("exact_limit", [0, 10_000], ids=["reused", "exact"])
def test_figures_equal_a_full_count_after_a_mixed_run(app: ChokaQ, exact_limit: int) -> None:
    mixed_run(app)
    clock = Clock()
    cache = FiguresCache(app.storage, exact_limit=exact_limit, max_age=60, clock=clock)
    f = cache.read()
    assert comparable(f.queues) == comparable(full_count(app))
    assert f.top_errors == AdminStore(app.storage).top_errors()
    assert (f.hot_exact, f.dlq_exact) == ((False, False) if exact_limit == 0 else (True, True))
    mail = next(q for q in f.queues if q.queue == "mail")
    assert (mail.pending, mail.dlq_size) == (6 + 2, 2 + 3)  # later + resurrected; bad left + cancelled
    ops = next(q for q in f.queues if q.queue == "ops")
    assert (ops.fetched, ops.processing) == (1, 1)

    # More work: an exact read sees it at once; a reused count shows it only once recounted.
    make_dead(app.storage, 2, type="late", queue="billing")
    enqueue(app.storage, type="later", queue="mail")
    clock.t += 30
    f2 = cache.read()
    if exact_limit:
        assert comparable(f2.queues) == comparable(full_count(app))
        assert f2.age_seconds == 0
    else:
        # The sizes are the last count's; the running totals are read on every call, exact.
        assert sizes(f2.queues) == sizes(f.queues)
        assert totals(f2.queues) == totals(full_count(app)) != totals(f.queues)
        assert f2.age_seconds == 30 and f2.counted_at_utc == f.counted_at_utc
        clock.t += 30
        f3 = cache.read()
        assert comparable(f3.queues) == comparable(full_count(app))
        assert f3.age_seconds == 0 and f3.top_errors == AdminStore(app.storage).top_errors()


def test_a_due_count_is_taken_once_while_others_serve_the_last(app: ChokaQ) -> None:
    make_dead(app.storage, 3)
    enqueue(app.storage)
    clock = Clock()
    cache = FiguresCache(app.storage, exact_limit=0, max_age=10, clock=clock)
    cache.read()
    counted: list[str] = []
    gate, inside = threading.Event(), threading.Event()
    real = cache._dlq.count

    def slow_count(c: Any) -> Any:
        counted.append(threading.current_thread().name)
        inside.set()
        gate.wait(30)
        return real(c)

    cache._dlq.count = slow_count
    clock.t += 11
    first = threading.Thread(target=cache.read, name="first")
    first.start()
    assert inside.wait(30)
    # While "first" counts, a second read serves the last count instead of counting too.
    served = cache.read()
    assert served.age_seconds == 11 and not served.dlq_exact
    gate.set()
    first.join(30)
    assert counted == ["first"]


def test_an_expensive_count_is_reused_longer(app: ChokaQ) -> None:
    """At most ``duty`` of the time is spent counting: a count that took 2 s is reused for 100 s
    (at 2%), not for the 10 s ``max_age`` names."""
    make_dead(app.storage, 1)
    clock = Clock()
    cache = FiguresCache(app.storage, exact_limit=0, max_age=10, clock=clock)
    real = cache._dlq.count

    def two_seconds(c: Any) -> Any:
        clock.t += 2
        return real(c)

    cache._dlq.count = two_seconds
    cache.read()
    taken = cache._dlq.last
    clock.t += 50
    assert cache.read().age_seconds == 50 and cache._dlq.last is taken
    clock.t += 50
    cache.read()
    assert cache._dlq.last is not taken


def test_the_api_says_whether_its_sizes_were_counted_now(db_url: str) -> None:
    from fastapi.testclient import TestClient

    from chokaq.api import create_api
    from tests.api.helpers import HEADERS

    for limit, exact in ((0, False), (10_000, True)):
        app = make_app(db_url, admin={"exact_count_limit": limit})
        try:
            make_dead(app.storage, 2, queue=f"q{limit}")
            with TestClient(create_api(app)) as client:
                body = client.get("/api/stats", headers=HEADERS["viewer"]).json()
        finally:
            app.close()
        assert body["figures"]["dlq_exact"] is exact
        assert body["figures"]["hot_exact"] is True  # JobsHot is empty: nothing to count
        assert body["figures"]["counted_at_utc"].endswith("Z") and body["figures"]["age_seconds"] >= 0
        assert next(q for q in body["queues"] if q["queue"] == f"q{limit}")["dlq_size"] == 2


def test_the_recent_rates_are_read_through_the_time_indexes(pg_url: str) -> None:
    """The rates' bound was ``clock_timestamp() - n min``: volatile, so PostgreSQL compared it row
    by row and read the whole DLQ and archive three times a call (0.3 s at 100,000 dead jobs)."""
    from sqlalchemy import event, text

    from chokaq.storage import Storage

    storage = Storage(pg_url)
    storage.upgrade()
    make_dead(storage, 3)
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:
        sent.append((statement, params))

    event.listen(storage.engine, "before_cursor_execute", record)
    try:
        rates = AdminStore(storage).recent_rates()
    finally:
        event.remove(storage.engine, "before_cursor_execute", record)
    assert rates["15m"] == {"succeeded": 0, "failed": 3}
    counts = [(s, p) for s, p in sent if s.startswith("SELECT count(*)")]
    assert len(counts) == 6
    try:
        with storage.engine.connect() as c:
            c.execute(text("SET enable_seqscan = off"))  # three rows: ask whether an index *can* serve it
            for statement, params in counts:
                raw = c.connection.driver_connection
                assert raw is not None
                cur = raw.cursor()
                cur.execute("EXPLAIN " + statement, params)
                plan = "\n".join(r[0] for r in cur.fetchall())
                bounded = [line for line in plan.splitlines() if "Index Cond" in line]
                assert any("FailedAtUtc" in line or "FinishedAtUtc" in line for line in bounded), plan
    finally:
        storage.close()
