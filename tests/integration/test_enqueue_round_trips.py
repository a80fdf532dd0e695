"""An enqueue to a queue this process knows is one round trip on PostgreSQL, and its NOTIFY still
wakes listeners when, and only when, the job is stored. Counted on the wire, by the proxy."""

from __future__ import annotations

from collections.abc import Callable

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
