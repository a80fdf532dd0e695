"""Bulk and async enqueue under lost replies (the fault proxy's mode 1, on PostgreSQL): a replay
never stores a job twice, and answers what the lost attempt stored."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select

from chokaq import ChokaQ
from chokaq.domain.models import EnqueueRequest
from chokaq.settings import StorageSettings
from chokaq.storage import Completion, Storage
from chokaq.storage.schema import jobs_archive, jobs_hot
from tests.faultproxy import FaultProxy

Proxy = Callable[[str], FaultProxy]
# Requests of a keyed bulk enqueue: BEGIN, the key lookup, the INSERTs, the NOTIFY, COMMIT; a few
# more so that every one of them loses its reply once.
REQUESTS = 8


def total(direct: Storage, tag: str) -> int:
    def count(c: Any) -> int:
        return sum(
            int(c.execute(select(func.count()).select_from(t).where(t.c.Tags == tag)).scalar_one())
            for t in (jobs_hot, jobs_archive)
        )

    return direct.read(count)


def proxied_app(proxy: FaultProxy, pg_url: str) -> ChokaQ:
    app = ChokaQ(storage_url=proxy.url(pg_url), storage=StorageSettings(transient_retries=5, listen_notify=False))
    app.storage.ping()
    return app


def test_a_bulk_enqueue_whose_replies_are_lost_stores_every_job_once(pg_url: str, fault_proxy: Proxy) -> None:
    direct = Storage(pg_url)
    direct.upgrade()
    proxy = fault_proxy(pg_url)
    app = proxied_app(proxy, pg_url)
    app.enqueue("warm", idempotency_key="warm")
    swallowed = 0
    for n in range(REQUESTS):
        tag = f"bulk-{n}"
        reqs = [app.prepare("t", {"i": i}, tags=tag) for i in range(300)]
        reqs += [app.prepare("t", tags=tag, idempotency_key=f"key-{n}"), app.prepare("t", idempotency_key="warm")]
        done = proxy.arm_swallow(after=n)
        out = app.enqueue_many(reqs)
        swallowed += proxy.wait_swallowed(done, 0.5)
        proxy.disarm()
        assert total(direct, tag) == 301, n
        # The lost attempt's own result: its new jobs created, the key another job holds not.
        assert [e.created for e in out] == [True] * 301 + [False], n
        assert len({e.id for e in out[:301]}) == 301
        assert all(direct.get_job(e.id) is not None for e in out[::50])
    assert swallowed >= 5
    app.close()
    direct.close()


def test_a_replayed_bulk_enqueue_does_not_store_again_jobs_that_already_ran(pg_url: str, fault_proxy: Proxy) -> None:
    """Between the lost COMMIT reply and the replay, a worker claims and archives the batch: the
    replay finds it in the archive and inserts nothing."""
    direct = Storage(pg_url)
    direct.upgrade()
    proxy = fault_proxy(pg_url)
    app = proxied_app(proxy, pg_url)
    app.enqueue("warm")
    direct.complete("w", [Completion(j.lease, 1) for j in direct.fetch("w", 10, start=True)])
    attempts = [0]

    def run_it_before_the_replay(op: str) -> None:
        if op == "enqueue_many":
            attempts[0] += 1
            if attempts[0] == 2:
                jobs = direct.fetch("w", 100, start=True)
                direct.complete("w", [Completion(j.lease, 1) for j in jobs])

    app.storage.fault_injector = run_it_before_the_replay
    done = proxy.arm_swallow(after=3)  # BEGIN, INSERT, NOTIFY, then COMMIT's reply is lost
    out = app.enqueue_many([EnqueueRequest(type="t", tags="ran") for _ in range(20)])
    assert proxy.wait_swallowed(done, 0.5)
    proxy.disarm()
    assert attempts[0] == 2
    assert total(direct, "ran") == 20 and len(out) == 20
    app.close()
    direct.close()


def test_async_enqueue_keeps_the_replay_rules(pg_url: str, fault_proxy: Proxy) -> None:
    direct = Storage(pg_url)
    direct.upgrade()
    proxy = fault_proxy(pg_url)
    app = proxied_app(proxy, pg_url)
    app.enqueue("warm")

    async def main(n: int) -> None:
        done = proxy.arm_swallow(after=n)
        await app.enqueue_async("t", tags=f"one-{n}")
        await app.enqueue_many_async([app.prepare("t", tags=f"many-{n}") for _ in range(10)])
        proxy.wait_swallowed(done, 0.5)
        proxy.disarm()

    for n in range(4):
        asyncio.run(main(n))
        assert total(direct, f"one-{n}") == 1 and total(direct, f"many-{n}") == 10, n
    app.close()
    direct.close()
