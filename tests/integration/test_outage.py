"""Hung and refused connections end as transient errors, and the sweep waits outages out."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from chokaq import ChokaQ
from chokaq.domain.models import EnqueueRequest
from chokaq.runtime.sweeper import sweep_forever, sweep_outlasting
from chokaq.settings import StorageSettings, load_settings
from chokaq.storage import Storage
from chokaq.storage.dialects.postgres import postgresql_connect_args
from chokaq.storage.engine import is_transient
from tests.faultproxy import FaultProxy
from tests.helpers import age, counts, wait_for

Proxy = Callable[[str], FaultProxy]


def test_postgresql_connect_args_end_hung_connections() -> None:
    args = postgresql_connect_args({}, 2.4, 1.5)
    assert args["connect_timeout"] == 2
    assert args["keepalives"] == 1 and args["keepalives_idle"] > 0 and args["tcp_user_timeout"] > 0
    assert args["options"] == "-c statement_timeout=1500"
    # The URL's own choices win; its options are kept.
    mine = postgresql_connect_args({"connect_timeout": "30", "options": "-c search_path=x"}, 2, 1)
    assert "connect_timeout" not in mine
    assert mine["options"] == "-c search_path=x -c statement_timeout=1000"
    assert "options" not in postgresql_connect_args({}, 2, 0)  # 0: no statement timeout


def test_a_statement_past_the_timeout_is_a_transient_error(pg_url: str) -> None:
    s = Storage(pg_url, settings=StorageSettings(statement_timeout=0.5, transient_retries=0))
    assert s.read(lambda c: c.execute(text("SHOW statement_timeout")).scalar()) == "500ms"
    with pytest.raises(OperationalError) as caught:
        s.read(lambda c: c.execute(text("SELECT pg_sleep(5)")).all())
    assert is_transient(caught.value)
    s.close()


def test_a_black_holed_connect_fails_within_the_connect_timeout(pg_url: str, fault_proxy: Proxy) -> None:
    proxy = fault_proxy(pg_url)
    s = Storage(proxy.url(pg_url), settings=StorageSettings(connect_timeout=1, transient_retries=0))
    with proxy.blackholed():
        with pytest.raises(OperationalError) as caught:
            s.ping()  # returns while the black hole is still there: the timeout ended it
        assert is_transient(caught.value)
        assert proxy.stats.accepted_while_blackholed >= 1
    s.ping()
    s.close()


def test_refused_connections_are_transient(pg_url: str, fault_proxy: Proxy) -> None:
    proxy = fault_proxy(pg_url)
    s = Storage(proxy.url(pg_url), settings=StorageSettings(connect_timeout=1, transient_retries=0))
    with proxy.refusing():
        for _ in range(2):  # the pooled connection's reset, then a refused connect
            with pytest.raises(OperationalError) as caught:
                s.ping()
            assert is_transient(caught.value)
    s.close()


def sweeping_storage(proxy: FaultProxy, pg_url: str) -> tuple[Storage, Storage]:
    direct = Storage(pg_url)
    direct.upgrade()
    return direct, Storage(proxy.url(pg_url), settings=StorageSettings(connect_timeout=1, transient_retries=1))


def test_a_one_off_sweep_waits_out_an_outage(pg_url: str, fault_proxy: Proxy) -> None:
    proxy = fault_proxy(pg_url)
    direct, s = sweeping_storage(proxy, pg_url)
    job_id, _ = direct.enqueue(EnqueueRequest(type="t"))
    direct.fetch("gone-worker", 1)
    age(direct, job_id, 3600)
    settings = load_settings()
    back = threading.Event()
    with proxy.refusing():
        t = threading.Thread(target=lambda: (sweep_outlasting(s, settings, budget=60), back.set()))
        t.start()
        wait_for(lambda: proxy.stats.refused_windows == 1)
        assert not back.is_set()
    t.join(30)
    assert back.is_set()
    assert counts(direct).get("pending") == 1  # swept once the database answered
    with proxy.refusing(), pytest.raises(OperationalError):
        sweep_outlasting(s, settings, budget=0.5)  # past its budget it gives up, saying why
    s.close()
    direct.close()


def test_the_sweep_loop_outlives_an_outage(pg_url: str, fault_proxy: Proxy) -> None:
    proxy = fault_proxy(pg_url)
    direct, s = sweeping_storage(proxy, pg_url)
    settings = load_settings(recovery={"scan_interval": 0.1})
    stop = threading.Event()
    loop = threading.Thread(target=sweep_forever, args=(s, settings, stop))
    loop.start()
    try:
        with proxy.refusing():
            job_id, _ = direct.enqueue(EnqueueRequest(type="t"))
            direct.fetch("gone-worker", 1)
            age(direct, job_id, 3600)
            wait_for(lambda: proxy.stats.refused_windows == 1)
            assert counts(direct).get("fetched") == 1  # nothing can sweep it now
        wait_for(lambda: counts(direct).get("pending") == 1, timeout=30)
        assert loop.is_alive()
    finally:
        stop.set()
        loop.join(10)
    s.close()
    direct.close()


def test_a_failed_claim_backs_off_from_the_polling_interval_while_listen_is_up(pg_url: str) -> None:
    # Listening, the worker looks for work only every IdlePollingInterval. A claim that failed
    # says nothing about new jobs: its retry backs off from PollingInterval, as without LISTEN.
    app = ChokaQ(storage_url=pg_url, storage={"polling_interval": 0.5, "idle_polling_interval": 4.0})
    app.storage.upgrade()
    worker = app.worker()
    seen: list[tuple[str, float]] = []
    failed = worker.outage.failed

    def record(where: str, exc: BaseException, delay: float) -> None:
        seen.append((where, delay))
        failed(where, exc, delay)

    def inject(op: str) -> None:
        if op == "fetch" and worker.fetcher.listening.is_set():
            app.storage.fault_injector = None
            raise OperationalError("injected", {}, RuntimeError("claim failed"))

    worker.outage.failed = record  # type: ignore[method-assign]
    app.storage.fault_injector = inject

    async def scenario() -> None:
        task = asyncio.create_task(worker.run_async())
        deadline = time.monotonic() + 30
        while not seen and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        worker.stop()
        await task

    asyncio.run(scenario())
    app.close()
    assert seen and seen[0][0] == "claim", seen
    assert seen[0][1] <= 0.5, seen  # backoff(0) from 0.5 s: 0.25-0.5 s; from the idle 4 s it was 2-4 s
