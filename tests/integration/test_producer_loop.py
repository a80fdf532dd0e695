"""``enqueue_async`` never blocks the event loop, even while the database holds its statement for
seconds; on PostgreSQL with ``Storage.ProducerOnLoop`` it runs on the loop itself (psycopg's
AsyncConnection), with the threads' results and replay rules, and no producer thread.

The slow statement is a real one: another connection holds an idempotency key in a transaction it
has not committed, so the enqueue's INSERT waits on the server (PostgreSQL: the unique index;
SQLite: the write lock) until that transaction rolls back. Meanwhile a ticker on the loop must keep
running on time. The same ticker with the synchronous enqueue is late by the whole wait: the
measurement sees a blocked loop when there is one.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import func, select, text

from chokaq import ChokaQ
from chokaq.settings import StorageSettings
from chokaq.storage.schema import jobs_hot
from tests.faultproxy import FaultProxy

HOLD = 1.5  # seconds the other transaction holds the key after the measured call starts
LATE = 0.1  # a generous bound on the ticker's lateness (its period is 10 ms)


class Rollback(Exception):
    pass


@pytest.fixture(params=[False, True], ids=["threads", "on_loop"])
def app(db_url: str, request: pytest.FixtureRequest) -> Iterator[ChokaQ]:
    # ProducerOnLoop changes nothing on SQLite (no asynchronous driver): its threads run twice.
    settings = StorageSettings(transient_retries=2, producer_on_loop=request.param)
    a = ChokaQ(storage_url=db_url, storage=settings)
    a.storage.upgrade()
    a.enqueue("warm")  # the engine has connected and the queue's row is known
    try:
        yield a
    finally:
        a.close()


def producer_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("chokaq-producer")]


def hold_key(app: ChokaQ, key: str, held: threading.Event, release: threading.Event) -> threading.Thread:
    """Another producer's transaction stores a job under ``key`` and rolls back once ``release`` is
    set (by :func:`lateness_during`, HOLD seconds after the measured call starts: a hold timed from
    here could end before a loaded machine even sends the call, which then would not wait)."""

    def run() -> None:
        try:
            with app.storage.engine.begin() as c:
                app.enqueue("t", idempotency_key=key, conn=c)
                held.set()
                release.wait(30)
                raise Rollback
        except Rollback:
            pass

    t = threading.Thread(target=run)
    t.start()
    assert held.wait(10)
    return t


async def lateness_during(call: Callable[[], Awaitable[Any]], release: threading.Event) -> tuple[Any, float, float]:
    """``call``'s result, how long it took, and the ticker's worst lateness meanwhile. ``release``
    is set HOLD seconds after the call starts, from a timer thread (a blocked loop could not)."""
    worst = 0.0
    stop = False

    async def ticker() -> None:
        nonlocal worst
        while not stop:
            want = time.perf_counter() + 0.01
            await asyncio.sleep(0.01)
            worst = max(worst, time.perf_counter() - want)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.05)
    start = time.perf_counter()
    timer = threading.Timer(HOLD, release.set)
    timer.start()
    result = await call()
    took = time.perf_counter() - start
    stop = True
    await task
    return result, took, worst


def test_a_slow_statement_never_blocks_the_loop(app: ChokaQ) -> None:
    held, release = threading.Event(), threading.Event()
    holder = hold_key(app, "slow", held, release)

    async def main() -> tuple[Any, float, float]:
        return await lateness_during(lambda: app.enqueue_async("t", idempotency_key="slow"), release)

    job_id, took, worst = asyncio.run(main())
    holder.join()
    assert took > 1.0, "the statement did wait for the other transaction"
    assert worst < LATE, f"the loop stalled for {worst:.3f}s during an enqueue of {took:.3f}s"
    rec = app.storage.get_job(job_id)
    assert rec is not None and rec.idempotency_key == "slow"


def test_a_slow_bulk_statement_never_blocks_the_loop(app: ChokaQ) -> None:
    held, release = threading.Event(), threading.Event()
    holder = hold_key(app, "slow-bulk", held, release)
    reqs = [app.prepare("t", {"n": n}) for n in range(200)] + [app.prepare("t", idempotency_key="slow-bulk")]

    async def main() -> tuple[Any, float, float]:
        return await lateness_during(lambda: app.enqueue_many_async(reqs), release)

    out, took, worst = asyncio.run(main())
    holder.join()
    assert took > 1.0 and worst < LATE, (took, worst)
    assert len(out) == 201 and all(e.created for e in out)


def test_the_sync_enqueue_under_the_same_slow_statement_stalls_the_loop(app: ChokaQ) -> None:
    """The control: the ticker sees a loop blocked by a database call."""
    held, release = threading.Event(), threading.Event()
    holder = hold_key(app, "slow-sync", held, release)

    async def blocking() -> str:
        return app.enqueue("t", idempotency_key="slow-sync")

    async def main() -> tuple[Any, float, float]:
        return await lateness_during(blocking, release)

    _, took, worst = asyncio.run(main())
    holder.join()
    assert took > 1.0 and worst > 1.0, (took, worst)


# ---------------------------------------------------------------------------- PostgreSQL: on the loop
@pytest.fixture
def pg_app(pg_url: str) -> Iterator[ChokaQ]:
    a = ChokaQ(storage_url=pg_url, storage=StorageSettings(transient_retries=2, producer_on_loop=True))
    a.storage.upgrade()
    a.enqueue("warm", queue="mail")
    try:
        yield a
    finally:
        a.close()


def stored(app: ChokaQ, **where: Any) -> int:
    query = select(func.count()).select_from(jobs_hot)
    for name, value in where.items():
        query = query.where(jobs_hot.c[name] == value)
    return int(app.storage.read(lambda c: c.execute(query).scalar_one()))


def test_on_postgresql_async_enqueues_run_on_the_loop_with_the_threads_results(pg_app: ChokaQ) -> None:
    app = pg_app
    existing = app.enqueue("t", queue="mail", idempotency_key="taken")

    async def main() -> None:
        one = await app.enqueue_async("t", {"a": 1}, queue="mail", tags="one", priority=3, delay=60)
        rec = app.storage.get_job(one)
        assert rec is not None and (rec.tags, rec.priority, rec.payload_json()) == ("one", 3, {"a": 1})
        assert await app.enqueue_async("t", queue="mail", idempotency_key="taken") == existing
        fresh = await app.enqueue_async("t", queue="mail", idempotency_key="fresh")
        assert await app.enqueue_async("t", queue="mail", idempotency_key="fresh") == fresh
        reqs = [app.prepare("t", {"n": n}, queue="mail", tags="many") for n in range(2_500)]
        reqs += [
            app.prepare("t", queue="mail", idempotency_key="taken"),
            app.prepare("t", queue="mail", idempotency_key="in-batch", tags="many"),
            app.prepare("t", queue="mail", idempotency_key="in-batch"),
        ]
        out = await app.enqueue_many_async(reqs)
        assert [e.created for e in out[-3:]] == [False, True, False]
        assert out[-3].id == existing and out[-1].id == out[-2].id
        sliced = await app.enqueue_many_async(
            [app.prepare("t", queue="mail", tags="sliced") for _ in range(5)], atomic=False
        )
        assert all(e.created for e in sliced)
        assert producer_threads() == [], "no enqueue went to a producer thread"

    asyncio.run(main())
    assert stored(app, Tags="many") == 2_501 and stored(app, Tags="sliced") == 5
    # A queue without a known row goes to the threads once (they create the row), then the loop.
    asyncio.run(app.enqueue_async("t", queue="new-queue"))
    assert producer_threads() != []


def test_on_the_loop_a_lost_reply_never_stores_a_job_twice(
    pg_url: str, fault_proxy: Callable[[str], FaultProxy]
) -> None:
    proxy = fault_proxy(pg_url)
    settings = StorageSettings(transient_retries=5, listen_notify=False, producer_on_loop=True)
    app = ChokaQ(storage_url=proxy.url(pg_url), storage=settings)
    app.storage.upgrade()
    app.enqueue("warm")
    swallowed = 0

    async def main(n: int) -> bool:
        # Each call's n-th request loses its reply: the statement, the lookups, BEGIN, COMMIT.
        seen = False
        for call in (
            lambda: app.enqueue_async("t", tags=f"one-{n}"),
            lambda: app.enqueue_async("t", tags=f"key-{n}", idempotency_key=f"key-{n}"),
            lambda: app.enqueue_many_async(
                [app.prepare("t", tags=f"many-{n}") for _ in range(10)]
                + [app.prepare("t", tags=f"many-{n}", idempotency_key=f"bulk-key-{n}")]
            ),
        ):
            done = proxy.arm_swallow(after=n)
            await call()
            seen |= await asyncio.to_thread(proxy.wait_swallowed, done, 0.5)
            proxy.disarm()
        return seen

    for n in range(5):
        swallowed += asyncio.run(main(n))
        assert stored(app, Tags=f"one-{n}") == 1, n
        assert stored(app, Tags=f"key-{n}") == 1, n
        assert stored(app, Tags=f"many-{n}") == 11, n
    assert swallowed >= 3
    assert producer_threads() == []
    app.close()


def test_the_loops_connections_close_as_the_loop_ends(pg_app: ChokaQ) -> None:
    app = pg_app

    def backends() -> int:
        query = text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return int(app.storage.read(lambda c: c.execute(query).scalar_one()))

    def settles(want: int) -> bool:
        # A backend leaves pg_stat_activity a moment after its client closed the socket.
        deadline = time.monotonic() + 10
        while backends() != want and time.monotonic() < deadline:
            time.sleep(0.05)
        return backends() == want

    before = backends()

    async def main() -> int:
        await asyncio.gather(*(app.enqueue_async("t", queue="mail") for _ in range(20)))
        return backends()

    during = asyncio.run(main())
    assert during > before, "the loop had connections of its own"
    assert settles(before)
    # A loop closed without closing its asynchronous generators: app.close() closes what it left.
    loop = asyncio.new_event_loop()
    loop.run_until_complete(app.enqueue_async("t", queue="mail"))
    assert backends() > before
    app.storage.on_loop.close()
    assert settles(before)
    loop.close()


def test_without_producer_on_loop_postgresql_enqueues_on_the_threads(pg_url: str) -> None:
    app = ChokaQ(storage_url=pg_url)
    app.storage.upgrade()
    app.enqueue("warm")
    job_id = asyncio.run(app.enqueue_async("t"))
    assert app.storage.get_job(job_id) is not None
    assert producer_threads() != []
    app.close()
