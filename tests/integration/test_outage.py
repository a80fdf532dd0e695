"""Hung and refused connections end as transient errors, and the sweep waits outages out."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from chokaq.domain.models import EnqueueRequest
from chokaq.runtime.sweeper import sweep_forever, sweep_outlasting
from chokaq.settings import StorageSettings, load_settings
from chokaq.storage import Storage
from chokaq.storage.engine import is_transient, postgresql_connect_args
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
