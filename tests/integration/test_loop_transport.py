"""PostgreSQL: the worker's claims and completions on its event loop (storage/loop_transport.py). Same
connection parameters, statements and outcomes as on the database threads; lost replies, cut
connections and refused statements handled as there."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
from sqlalchemy import Pool, event, func, select, text
from sqlalchemy.exc import DBAPIError

from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import JobStatus
from chokaq.runtime.handlers import JobContext
from chokaq.settings import StorageSettings
from chokaq.storage import Storage
from chokaq.storage.loop_transport import LoopTransport
from chokaq.storage.schema import jobs_archive, jobs_hot, stats_summary
from chokaq.storage.store import Completion
from chokaq.storage.transactions import Ambiguity
from tests.faultproxy import FaultProxy
from tests.helpers import wait_for
from tests.integration.test_worker import Running, make_app

T = TypeVar("T")
Proxy = Callable[[str], FaultProxy]


@pytest.fixture
def direct(pg_url: str) -> Iterator[Storage]:
    s = Storage(pg_url)
    s.upgrade()
    yield s
    s.close()


def on_loop(s: Storage, use: Callable[[LoopTransport], Awaitable[T]]) -> T:
    """``use`` a loop driver of ``s`` on a loop of its own, closed afterwards."""

    async def go() -> T:
        driver = s.loop_transport()
        assert driver is not None
        try:
            return await use(driver)
        finally:
            await driver.close()

    return asyncio.run(go())


def through(proxy: FaultProxy, pg_url: str) -> Storage:
    s = Storage(proxy.url(pg_url), settings=StorageSettings(transient_retries=5, listen_notify=False))
    s.ping()  # the engine has connected: the loop driver knows its arguments from here
    return s


def test_the_loop_transport_connects_as_the_engine_does(pg_url: str, direct: Storage) -> None:
    s = Storage(pg_url, settings=StorageSettings(statement_timeout=7))
    assert s.loop_transport() is None  # the engine has not connected yet: its arguments are unknown
    s.ping()
    setting = select(func.current_setting("statement_timeout"))

    async def read(driver: LoopTransport) -> Any:
        return await driver.run(setting, {}, op="read", seen=Ambiguity())

    # The statement timeout rides in the engine's connect arguments (postgresql_connect_args).
    assert on_loop(s, read) == [("7s",)]
    s.close()
    lite = Storage("sqlite:///:memory:")
    assert lite.loop_transport() is None  # no asynchronous driver there
    lite.close()


def test_a_claim_and_a_completion_on_the_loop_do_what_they_do_on_the_threads(direct: Storage) -> None:
    ids = direct.enqueue_many([EnqueueRequest(type="t") for _ in range(3)])
    assert direct.fetches_on_loop() is False  # the MaxWorkers list has not been read yet
    direct.fetch("w0", 0)  # reads it
    assert direct.fetches_on_loop()

    async def claim_and_complete(driver: LoopTransport) -> tuple[list[Any], set[str], list[Any]]:
        seen = Ambiguity()
        jobs = await direct.fetch_on_loop(driver, "w1", 5, seen=seen, start=True)
        assert not seen.ambiguous
        running = [direct.get_job(j.id) for j in jobs]
        moved, missing = await direct.complete_on_loop(driver, "w1", [Completion(j.lease, 3) for j in jobs])
        return running, moved, missing

    running, moved, missing = on_loop(direct, claim_and_complete)
    assert sorted(r.id for r in running if r) == sorted(ids)
    assert all(r and r.status == JobStatus.PROCESSING and r.attempt_count == 1 and r.worker_id == "w1" for r in running)
    assert moved == set(ids) and missing == []
    archived = direct.read(lambda c: c.execute(select(jobs_archive.c.Id, jobs_archive.c.DurationMs)).all())
    assert sorted(archived) == sorted((i, 3) for i in ids)
    total = direct.read(lambda c: c.execute(select(stats_summary.c.SucceededTotal)).scalar_one())
    assert total == 3


def test_a_claim_on_the_loop_whose_reply_is_lost_is_ambiguous(pg_url: str, direct: Storage, fault_proxy: Proxy) -> None:
    """The claim ran and its reply never came: the replay finds nothing left to claim, and the call
    says it may have committed unheard, so the worker reconciles (see reconcile.py)."""
    proxy = fault_proxy(pg_url)
    s = through(proxy, pg_url)
    ids = direct.enqueue_many([EnqueueRequest(type="t") for _ in range(2)])
    seen = Ambiguity()

    async def claim(driver: LoopTransport) -> list[Any]:
        await driver.run(select(1), {}, op="warm", seen=Ambiguity())  # connected before the swallow
        done = proxy.arm_swallow()
        jobs = await s.fetch_on_loop(driver, "w1", 2, seen=seen, start=True)
        assert proxy.wait_swallowed(done, 1.0)
        return jobs

    assert on_loop(s, claim) == []
    assert seen.ambiguous
    rows = [direct.get_job(i) for i in ids]
    assert all(r and r.status == JobStatus.PROCESSING and r.worker_id == "w1" for r in rows)  # for the reconcile
    s.close()


def test_a_completion_on_the_loop_whose_reply_is_lost_is_recognised(
    pg_url: str, direct: Storage, fault_proxy: Proxy
) -> None:
    proxy = fault_proxy(pg_url)
    s = through(proxy, pg_url)
    direct.enqueue_many([EnqueueRequest(type="t") for _ in range(3)])
    first, *jobs = direct.fetch("w1", 3, start=True)
    ids = [j.id for j in jobs]

    async def complete(driver: LoopTransport) -> tuple[set[str], list[Any]]:
        # The first completion prepares the statement (a request of its own, whose reply is not
        # the one to lose here); the second one's execution loses its reply.
        assert await s.complete_on_loop(driver, "w1", [Completion(first.lease, 5)]) == ({first.id}, [])
        done = proxy.arm_swallow()
        result = await s.complete_on_loop(driver, "w1", [Completion(j.lease, 5) for j in jobs])
        assert proxy.wait_swallowed(done, 1.0)
        return result

    moved, missing = on_loop(s, complete)
    # The replay moved nothing (the lost attempt had); the archive says those were ours.
    assert moved == set() and sorted(lease.job_id for lease in missing) == sorted(ids)
    assert s.archived_already(missing) == set(ids)
    s.close()


def test_the_loop_transport_replaces_its_connections_after_they_were_cut(
    pg_url: str, direct: Storage, fault_proxy: Proxy
) -> None:
    proxy = fault_proxy(pg_url)
    s = through(proxy, pg_url)
    pid = select(func.pg_backend_pid())

    async def use(driver: LoopTransport) -> tuple[Any, Any, Any]:
        first = await driver.run(pid, {}, op="pid", seen=Ambiguity())
        again = await driver.run(pid, {}, op="pid", seen=Ambiguity())
        assert proxy.cut_all() >= 1
        after = await driver.run(pid, {}, op="pid", seen=Ambiguity())  # replayed on a new connection
        return first, again, after

    first, again, after = on_loop(s, use)
    assert first == again  # one connection, kept between calls
    assert after != first
    s.close()


def test_a_disconnect_seen_on_a_thread_retires_the_loop_transports_connections(direct: Storage) -> None:
    """One clock for both paths: after a failover the loop driver does not meet a dead connection
    the threads already found, which would cost a replay and a reconcile."""
    pid = select(func.pg_backend_pid())

    async def use(driver: LoopTransport) -> tuple[Any, Any, Any]:
        first = await driver.run(pid, {}, op="pid", seen=Ambiguity())
        again = await driver.run(pid, {}, op="pid", seen=Ambiguity())
        direct.tx.executor.disconnected()  # what a thread's broken connection records
        return first, again, await driver.run(pid, {}, op="pid", seen=Ambiguity())

    first, again, after = on_loop(direct, use)
    assert first == again and after != first


def test_a_disconnect_seen_on_the_loop_retires_the_threads_connections(
    pg_url: str, direct: Storage, fault_proxy: Proxy
) -> None:
    """And the other way round: the thread's statement after the loop met the failover goes out on
    a new connection instead of failing on its dead one."""
    proxy = fault_proxy(pg_url)
    s = through(proxy, pg_url)
    pid = select(func.pg_backend_pid())
    executor = s.tx.executor
    on_thread = executor.run(pid, {}, sending=lambda: None, prepare=False)

    async def use(driver: LoopTransport) -> None:
        await driver.run(pid, {}, op="pid", seen=Ambiguity())
        assert proxy.cut_all() >= 2  # the thread's connection and the loop's
        await driver.run(pid, {}, op="pid", seen=Ambiguity())  # fails once, replayed

    on_loop(s, use)
    assert executor.run(pid, {}, sending=lambda: None, prepare=False) != on_thread  # no error: replaced first
    s.close()


def test_a_refused_statement_is_not_replayed_and_keeps_the_connection(direct: Storage) -> None:
    attempts: list[str] = []
    direct.fault_injector = attempts.append
    pid = select(func.pg_backend_pid())

    async def use(driver: LoopTransport) -> tuple[Any, Any]:
        before = await driver.run(pid, {}, op="pid", seen=Ambiguity())
        seen = Ambiguity()
        with pytest.raises(DBAPIError, match="division by zero"):
            await driver.run(select(func.div(1, 0)), {}, op="refused", seen=seen)
        assert not seen.ambiguous  # the server answered: it ran nothing
        return before, await driver.run(pid, {}, op="pid", seen=Ambiguity())

    before, after = on_loop(direct, use)
    direct.fault_injector = None
    assert attempts == ["pid", "refused", "pid"]  # not replayed
    assert before == after


def test_a_postgres_worker_claims_and_completes_on_its_loop(pg_url: str) -> None:
    """Its claims and completions take no database thread (a claim while the MaxWorkers list is
    due for its re-read, about once a second, would), and every job runs once."""
    app = make_app(pg_url)
    ran: list[str] = []

    @app.job("t")
    async def t(payload: Any, ctx: JobContext) -> None:
        ran.append(ctx.job_id)

    s = app.storage
    threads = {"fetch": 0, "complete": 0}
    loop = {"fetch": 0, "complete": 0}

    def counted(name: str, fn: Callable[..., Any], tally: dict[str, int]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            tally[name] += 1
            return fn(*args, **kwargs)

        return call

    s.fetch = counted("fetch", s.fetch, threads)  # type: ignore[method-assign]
    s.complete = counted("complete", s.complete, threads)  # type: ignore[method-assign]
    s.fetch_on_loop = counted("fetch", s.fetch_on_loop, loop)  # type: ignore[method-assign]
    s.complete_on_loop = counted("complete", s.complete_on_loop, loop)  # type: ignore[method-assign]
    ids = s.enqueue_many([EnqueueRequest(type="t") for _ in range(200)])
    s.queue_cache.pin_limited([], for_seconds=600)  # no re-read of the MaxWorkers list in between
    w = Running(app.worker())
    try:
        wait_for(lambda: w.worker.counts.succeeded == len(ids))
    finally:
        w.stop()
    assert sorted(ran) == sorted(ids)
    assert threads == {"fetch": 0, "complete": 0}
    assert loop["fetch"] >= 1 and loop["complete"] >= 1


def test_an_engine_whose_connections_do_more_than_their_arguments_keeps_the_threads(pg_url: str) -> None:
    """Hooks run only in the engine's own connects: a ``do_connect`` (a token sign-in, say, which
    a loop driver connecting with the arguments it saw once could outlive), a pool ``connect`` or
    ``checkout`` hook (a ``SET ROLE``), also one registered on every pool. An engine the caller
    built may have any of them. The worker says once why it keeps the threads."""
    s = Storage(pg_url)
    second = Storage(pg_url, engine=s.engine)  # its own do_connect listener is no foreign hook
    said = Said()
    logger = logging.getLogger("chokaq.storage")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(said)
    try:
        s.ping()
        assert asyncio.run(_made(s))

        def sign_in(_dialect: Any, _record: Any, _cargs: Any, cparams: dict[str, Any]) -> None:
            pass

        def set_role(_dbapi_conn: Any, _record: Any, *_proxy: Any) -> None:
            pass

        hooks: list[tuple[Any, str, Callable[..., None]]] = [
            (s.engine, "do_connect", sign_in),
            (s.engine, "connect", set_role),
            (s.engine, "checkout", set_role),
            (Pool, "connect", set_role),
        ]
        for target, hook, fn in hooks:
            event.listen(target, hook, fn)
            try:
                assert not asyncio.run(_made(s)), hook
                assert not asyncio.run(_made(s)), hook
            finally:
                event.remove(target, hook, fn)
            lines = [m for m in said.messages if fn.__qualname__ in m and f"{hook} hook" in m]
            assert len(lines) == 1 and "database threads" in lines[0], (hook, said.messages)  # once, naming it
            assert asyncio.run(_made(s)), hook
        assert not asyncio.run(_made(second))  # an engine the caller built
    finally:
        logger.removeHandler(said)
        logger.setLevel(level)
        second.close()
        s.close()


class Said(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def _made(s: Storage) -> bool:
    driver = s.loop_transport()
    if driver is None:
        return False
    await driver.close()
    return True


def test_a_completion_cancelled_on_the_loop_still_commits(direct: Storage) -> None:
    """A thread finishes a statement whose waiter was cancelled (the worker giving up on its
    outcomes at the end of a stop); psycopg would cancel it on the server instead, leaving a job
    whose handler succeeded Processing for the sweep. The driver lets it finish, and its close
    waits for it."""
    ids = direct.enqueue_many([EnqueueRequest(type="t") for _ in range(2)])
    jobs = direct.fetch("w1", 2, start=True)
    holder = direct.engine.connect()
    holder.begin()
    # A lock on one of the rows holds the completion in the server until it is let go.
    holder.execute(select(jobs_hot.c.Id).where(jobs_hot.c.Id == ids[0]).with_for_update())

    async def cancelled_completion() -> None:
        driver = direct.loop_transport()
        assert driver is not None
        task = asyncio.create_task(direct.complete_on_loop(driver, "w1", [Completion(j.lease, 1) for j in jobs]))
        await wait_until_blocked(direct)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert driver._finishing  # still running, in the server, behind the lock
        closing = asyncio.create_task(driver.close())
        await asyncio.sleep(0.2)
        assert not closing.done()  # the close waits for it
        holder.rollback()
        await closing
        assert not driver._finishing
        with pytest.raises(RuntimeError, match="closed"):  # and nothing runs on it after its close
            await driver.run(select(1), {}, op="late", seen=Ambiguity())

    try:
        asyncio.run(cancelled_completion())
    finally:
        holder.close()
    archived = direct.read(lambda c: c.execute(select(jobs_archive.c.Id)).scalars().all())
    assert sorted(archived) == sorted(ids)


async def wait_until_blocked(s: Storage) -> None:
    """Until a statement of the database waits on a lock (the completion, behind the holder)."""
    waiting = (
        select(func.count())
        .select_from(text("pg_stat_activity"))
        .where(text("wait_event_type = 'Lock' AND datname = current_database()"))
    )
    for _ in range(500):
        if await asyncio.to_thread(lambda: s.read(lambda c: c.execute(waiting).scalar_one())):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the completion never waited on the lock")
