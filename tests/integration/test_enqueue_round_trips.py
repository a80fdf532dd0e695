"""An enqueue to a queue this process knows is one round trip on PostgreSQL, and its NOTIFY still
wakes listeners when, and only when, the job is stored. Counted on the wire, by the proxy."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError

from chokaq.domain.models import EnqueueRequest
from chokaq.settings import StorageSettings
from chokaq.storage import Storage
from chokaq.storage.wakeups import NOTIFY_CHANNEL
from tests.faultproxy import FaultProxy

pytestmark = pytest.mark.postgres


def listener(pg_url: str) -> psycopg.Connection[tuple[object, ...]]:
    dsn = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
    return conn


def notified(conn: psycopg.Connection[tuple[object, ...]], timeout: float) -> list[str]:
    return [n.payload for n in conn.notifies(timeout=timeout, stop_after=1)]


def test_an_enqueue_to_a_known_queue_is_one_round_trip_that_notifies_on_commit(
    pg_url: str, fault_proxy: Callable[[str], FaultProxy]
) -> None:
    proxy = fault_proxy(pg_url)
    s = Storage(proxy.url(pg_url), settings=StorageSettings(transient_retries=0, listen_notify=False))
    s.upgrade()
    listen = listener(pg_url)
    try:
        before = proxy.stats.replies
        first, _ = s.enqueue(EnqueueRequest(type="t", queue="mail"))
        # A queue not met yet: its row and the job in one transaction.
        assert proxy.stats.replies - before > 1
        assert notified(listen, 5.0) == ["mail"]

        for req in (
            EnqueueRequest(type="t", queue="mail"),
            EnqueueRequest(type="t", queue="mail", tags="x", created_by="me", delay_seconds=0.5, priority=3),
        ):
            # Each shape of the INSERT is prepared on the connection at its first use, which
            # costs that one enqueue a round trip more (the PREPARE); every later one is one.
            s.enqueue(req)
            assert notified(listen, 5.0) == ["mail"]
            before = proxy.stats.replies
            job_id, created = s.enqueue(req)
            assert created and proxy.stats.replies - before == 1, req
            assert notified(listen, 5.0) == ["mail"]
            job = s.get_job(job_id)
            assert job is not None and (job.queue, job.tags, job.created_by, job.priority) == (
                "mail",
                req.tags,
                req.created_by,
                req.priority,
            )
            if req.delay_seconds:
                assert job.scheduled_at_utc is not None and job.created_at_utc is not None
                assert job.scheduled_at_utc > job.created_at_utc

        # A failed insert (the id is taken) stores nothing and wakes nobody.
        with pytest.raises(IntegrityError):
            s.enqueue(EnqueueRequest(type="t", queue="mail", tags="twice"), job_id=first)
        assert notified(listen, 0.5) == []
    finally:
        listen.close()
        s.close()


def _backends(pg_url: str) -> int:
    """Connections to the test's database, as the server counts them."""
    dsn = make_url(pg_url).set(drivername="postgresql", database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as c:
        row = c.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (make_url(pg_url).database,)
        ).fetchone()
        return int(row[0]) if row else 0


def test_producer_threads_share_the_pool_and_never_hold_connections_of_their_own(pg_url: str) -> None:
    # Producers are the application's threads, possibly many: their enqueues go through the
    # driver on a pooled connection, so what they hold stays bounded by Storage.PoolSize.
    s = Storage(pg_url, settings=StorageSettings(pool_size=2, listen_notify=False))
    s.upgrade()
    s.enqueue(EnqueueRequest(type="t", queue="mail"))  # the queue's row
    peak = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _backends(pg_url))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            ids = list(pool.map(lambda i: s.enqueue(EnqueueRequest(type="t", queue="mail"))[0], range(400)))
    finally:
        stop.set()
        watcher.join()
    try:
        assert len(set(ids)) == 400
        dsn = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
        with psycopg.connect(dsn, autocommit=True) as c:
            row = c.execute('SELECT count(*) FROM chokaq."JobsHot"').fetchone()
        assert row is not None and row[0] == 401
        # pool_size 2 plus as many again in overflow (the watcher connects to another database).
        assert peak <= 2 * 2, peak
        assert _backends(pg_url) <= 2 * 2
    finally:
        s.close()


def test_after_the_server_dropped_every_connection_one_replay_is_enough(pg_url: str) -> None:
    # A disconnect means the server restarted or failed over: every pooled connection broke, not
    # only the one that said so. The pool replaces them all (as SQLAlchemy does), so the replay
    # gets a live one instead of failing on the next dead one and running out of retries.
    s = Storage(pg_url, settings=StorageSettings(pool_size=3, transient_retries=1, listen_notify=False))
    s.upgrade()
    s.enqueue(EnqueueRequest(type="t", queue="mail"))
    held = [s.engine.connect() for _ in range(3)]  # three idle connections in the pool
    for c in held:
        c.close()
    dsn = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
    try:
        ids = [s.enqueue(EnqueueRequest(type="t", queue="mail"))[0] for _ in range(3)]
        with psycopg.connect(dsn, autocommit=True) as c:
            row = c.execute('SELECT count(*) FROM chokaq."JobsHot"').fetchone()
        assert row is not None and row[0] == 1 + 3  # each stored once
        assert all(s.get_job(i) is not None for i in ids)
    finally:
        s.close()
