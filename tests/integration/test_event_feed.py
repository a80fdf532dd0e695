"""The event feed on real databases (SQLite, PostgreSQL): what writes a row and what never does,
the follower's cursor and its skipping of its own process's rows, and the count-bounded purge."""

from __future__ import annotations

import sqlite3
from typing import Any

from sqlalchemy import event, func, select

from chokaq import ChokaQ, FatalError
from chokaq.api.feed_follower import FeedFollower
from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import FailureReason
from chokaq.runtime.events import EventBus
from chokaq.storage import DeadLetter, EventFeed, Storage, purge_events
from chokaq.storage import event_feed as ef
from chokaq.storage.schema import audit_log, event_feed
from tests.helpers import counts, wait_for
from tests.integration.test_worker import make_app

N = 100


def feed_rows(storage: Storage) -> list[ef.FeedRow]:
    return EventFeed(storage).after(0, 100_000)


def test_successful_jobs_write_no_feed_row_and_send_no_statement_for_it(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url)
    sent: list[str] = []

    @app.job("ok")
    async def ok(payload: Any) -> None:
        return None

    if app.storage.dialect == "sqlite":
        # Every statement any connection of this engine sends, the hot path's driver connections too.
        @event.listens_for(app.storage.engine, "connect")
        def trace(dbapi: sqlite3.Connection, _: Any) -> None:
            dbapi.set_trace_callback(sent.append)

        app.storage.engine.dispose()
        app.storage.tx.executor.close()
    ids = [app.enqueue("ok") for _ in range(N)]
    w = run_worker(app)
    wait_for(lambda: counts(app.storage).get("archive") == N, timeout=60)
    w.stop()
    worker_sent = list(sent)
    assert not [sql for sql in worker_sent if "EventFeed" in sql or "AuditLog" in sql]
    if app.storage.dialect == "sqlite":
        assert any("JobsArchive" in sql for sql in worker_sent), "the trace saw the worker's moves"
    assert len(ids) == N and feed_rows(app.storage) == []
    app.close()


def test_a_batch_of_failures_writes_one_row_per_reason_with_the_ids(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url, execution={"fetch_batch_size": 20, "concurrency": 20})

    @app.job("bad")
    async def bad(payload: Any) -> None:
        raise FatalError("no")

    ids = {app.enqueue("bad") for _ in range(20)}
    w = run_worker(app)
    wait_for(lambda: counts(app.storage).get("dlq") == 20, timeout=60)
    w.stop()
    rows = feed_rows(app.storage)
    assert {r.kind for r in rows} == {"dlq.batch"}
    assert all(r.data["reason"] == FailureReason.FATAL_ERROR.label for r in rows)
    assert sum(r.data["count"] for r in rows) == 20 and {i for r in rows for i in r.data["ids"]} == ids
    assert len(rows) < 20, "one row per batch, not one per job"
    app.close()


def test_fail_many_moves_and_records_in_one_transaction_only_what_moved(storage: Storage) -> None:
    from chokaq.domain.models import Lease

    job_id, _ = storage.enqueue(EnqueueRequest(type="t"))
    (job,) = storage.fetch("w", 1)
    storage.start("w", [job])
    stale = DeadLetter(Lease("nope", "w", 1), FailureReason.FATAL_ERROR, "x")
    moved = storage.fail_many([DeadLetter(job.lease, FailureReason.FATAL_ERROR, "x"), stale])
    assert moved == {job_id}
    (row,) = feed_rows(storage)
    assert (row.kind, row.data["count"], row.data["ids"], row.origin) == ("dlq.batch", 1, [job_id], storage.origin)


def test_the_follower_skips_its_own_rows_and_delivers_other_processes(db_url: str) -> None:
    mine = Storage(db_url)
    mine.upgrade()
    other = Storage(db_url)  # another process's storage: another origin
    bus = EventBus()
    follower = FeedFollower(EventFeed(mine), bus)
    mine.write(lambda c: ef.record(c, "audit", {"action": "old"}))
    assert follower.tick() == 0 and follower.cursor is not None  # starts at the head: no history
    mine.write(lambda c: ef.record(c, "audit", {"action": "mine"}))
    other.write(lambda c: ef.record(c, "dlq.batch", {"reason": "Zombie", "count": 2, "ids": ["a", "b"]}))
    assert follower.tick() == 1
    (e,) = list(bus.recent)
    assert e.kind == "dlq.batch" and e.data["ids"] == ["a", "b"] and e.feed_id == follower.cursor
    assert follower.tick() == 0  # read again within the lookback: never delivered twice
    mine.close()
    other.close()


def test_the_feed_stays_bounded_by_count_under_a_burst(storage: Storage) -> None:
    burst = 5_000
    keep = 300

    def write(c: Any) -> None:
        for i in range(burst):
            ef.record(c, "dlq.batch", {"reason": "Zombie", "count": 1, "ids": [str(i)]})

    storage.write(write)
    newest = EventFeed(storage).head()
    deleted = purge_events(storage, max_age=86400, max_rows=keep, size=1000)
    assert deleted == burst - keep
    rows = feed_rows(storage)
    assert len(rows) == keep and rows[-1].id == newest and rows[0].data["ids"] == [str(burst - keep)]
    # Not audited: AuditLog has no retention, and a row per purge batch would move the feed's
    # growth there (a log line says what went).
    audits = storage.read(lambda c: c.execute(select(audit_log.c.Actor, audit_log.c.Details)).all())
    assert audits == []
    assert purge_events(storage, max_age=86400, max_rows=keep, size=1000) == 0
    n = storage.read(lambda c: c.execute(select(func.count()).select_from(event_feed)).scalar_one())
    assert n == keep


def test_the_sweep_audits_its_rescue_as_the_system_with_the_ids(storage: Storage) -> None:
    job_id, _ = storage.enqueue(EnqueueRequest(type="t"))
    storage.fetch("w", 1)
    result = storage.sweep(fetched_timeout=-1, zombie_timeout=60, max_attempts=3)
    assert result.recovered == 1
    (row,) = feed_rows(storage)
    assert (row.kind, row.data["recovered"], row.data["ids"]) == ("zombie.rescue", 1, [job_id])
    actor, action = storage.read(lambda c: c.execute(select(audit_log.c.Actor, audit_log.c.Action)).one())
    assert (actor, action) == ("system:sweep", "sweep.rescue")
    # An idle sweep writes nothing.
    storage.sweep(fetched_timeout=60, zombie_timeout=60, max_attempts=3)
    assert len(feed_rows(storage)) == 1


def test_an_operator_action_from_another_surface_reaches_the_feed(db_url: str) -> None:
    app = ChokaQ(storage_url=db_url)
    app.storage.upgrade()
    from chokaq.storage import Actor, AdminStore

    job_id = app.enqueue("t")
    AdminStore(app.storage).cancel([job_id], Actor("cli:ops", "operator"))
    AdminStore(app.storage).resurrect(job_id, Actor("cli:ops", "operator"))
    kinds = [(r.kind, r.data["action"], r.data["actor"]) for r in feed_rows(app.storage)]
    assert kinds[-1] == ("audit", "dlq.resurrect", "cli:ops")
    app.close()


def test_postgres_notify_wakes_the_follower_at_each_commit(db_url: str) -> None:
    import threading

    mine = Storage(db_url)
    mine.upgrade()
    if not mine.supports_notify:
        mine.close()
        return  # the ticks alone elsewhere (the stream hub's interval)
    other = Storage(db_url)
    follower = FeedFollower(EventFeed(mine), EventBus())
    wakes: list[int] = []
    lock = threading.Lock()

    def wake() -> None:
        with lock:
            wakes.append(1)

    assert follower.listen(wake)
    try:
        wait_for(lambda: follower.listening.is_set() and len(wakes) == 1)  # its own wake on connecting
        other.write(lambda c: ef.record(c, "audit", {"action": "x"}))
        wait_for(lambda: len(wakes) == 2, timeout=10)
    finally:
        follower.stop_listening()
        mine.close()
        other.close()
