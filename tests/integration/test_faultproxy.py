"""The fault proxy itself, against the real PostgreSQL server: each mode does what it says."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.faultproxy import FaultProxy, _Framer

Proxy = Callable[[str], FaultProxy]


def dsn(url: str, **extra: object) -> str:
    u = make_url(url).set(drivername="postgresql")
    if extra:
        u = u.update_query_dict({k: str(v) for k, v in extra.items()})
    return u.render_as_string(hide_password=False)


@pytest.fixture
def pg(pg_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(dsn(pg_url), autocommit=True) as c:
        c.execute("CREATE TABLE t (n int)")
        yield c


def test_swallowed_reply_ran_on_the_server_but_never_arrived(
    pg_url: str, pg: psycopg.Connection, fault_proxy: Proxy
) -> None:
    proxy = fault_proxy(pg_url)
    with psycopg.connect(dsn(proxy.url(pg_url)), autocommit=True) as c:
        c.execute("SELECT 1")  # start-up done: the link is ready
        result: list[BaseException | None] = []

        def insert() -> None:
            try:
                c.execute("INSERT INTO t VALUES (1)")
                result.append(None)
            except BaseException as exc:  # recorded for the assertion
                result.append(exc)

        swallowed: list[bool] = []
        waiter = threading.Thread(target=lambda: swallowed.append(proxy.swallow_next_reply(timeout=10)))
        waiter.start()
        # The proxy arms from within swallow_next_reply; the request sent after that is the victim.
        deadline = time.monotonic() + 10
        while proxy._armed is None and time.monotonic() < deadline:
            time.sleep(0.01)
        insert()
        waiter.join(15)
    assert swallowed == [True]
    assert isinstance(result[0], psycopg.OperationalError)
    assert pg.execute("SELECT count(*) FROM t").fetchone() == (1,)  # it committed all the same
    assert proxy.stats.swallowed == 1


def test_swallow_waits_for_a_request(pg_url: str, fault_proxy: Proxy) -> None:
    proxy = fault_proxy(pg_url)
    assert proxy.swallow_next_reply(timeout=0.2) is False


def test_cut_all_resets_every_open_connection(pg_url: str, fault_proxy: Proxy) -> None:
    proxy = fault_proxy(pg_url)
    conns = [psycopg.connect(dsn(proxy.url(pg_url)), autocommit=True) for _ in range(3)]
    try:
        for c in conns:
            c.execute("SELECT 1")
        assert proxy.cut_all() == 3
        for c in conns:
            with pytest.raises(psycopg.OperationalError):
                c.execute("SELECT 1")
        with psycopg.connect(dsn(proxy.url(pg_url)), autocommit=True) as fresh:
            assert fresh.execute("SELECT 2").fetchone() == (2,)
    finally:
        for c in conns:
            c.close()


def test_refusing_means_connection_refused_then_back(pg_url: str, fault_proxy: Proxy) -> None:
    proxy = fault_proxy(pg_url)
    old = psycopg.connect(dsn(proxy.url(pg_url)), autocommit=True)
    old.execute("SELECT 1")
    with proxy.refusing():
        with pytest.raises(psycopg.OperationalError, match=r"(?i)refused"):
            psycopg.connect(dsn(proxy.url(pg_url), connect_timeout=5))
        with pytest.raises(psycopg.OperationalError):
            old.execute("SELECT 1")
    with psycopg.connect(dsn(proxy.url(pg_url)), autocommit=True) as c:
        assert c.execute("SELECT 3").fetchone() == (3,)
    old.close()


def test_blackhole_hangs_connects_until_the_timeout_and_resets_at_the_end(pg_url: str, fault_proxy: Proxy) -> None:
    proxy = fault_proxy(pg_url)
    old = psycopg.connect(dsn(proxy.url(pg_url)), autocommit=True)
    old.execute("SELECT 1")
    errors: list[BaseException] = []

    def hang() -> None:
        try:
            old.execute("SELECT 1")
        except psycopg.OperationalError as exc:
            errors.append(exc)

    with proxy.blackholed():
        t0 = time.monotonic()
        with pytest.raises(psycopg.OperationalError, match=r"(?i)timeout"):
            psycopg.connect(dsn(proxy.url(pg_url), connect_timeout=1))
        assert time.monotonic() - t0 >= 0.9  # it waited for an answer that never came
        assert proxy.stats.accepted_while_blackholed == 1  # accepted, not refused
        hung = threading.Thread(target=hang)
        hung.start()
        hung.join(0.3)
        assert hung.is_alive() and not errors  # the old connection's request is stuck
    hung.join(10)
    assert len(errors) == 1  # reset when the window closed
    with psycopg.connect(dsn(proxy.url(pg_url)), autocommit=True) as c:
        assert c.execute("SELECT 4").fetchone() == (4,)
    old.close()


def test_latency_delays_every_reply(pg_url: str, fault_proxy: Proxy) -> None:
    proxy = fault_proxy(pg_url)
    with psycopg.connect(dsn(proxy.url(pg_url)), autocommit=True) as c:
        proxy.set_latency(0.2)
        t0 = time.monotonic()
        for _ in range(3):
            c.execute("SELECT 1")
        assert time.monotonic() - t0 >= 0.6
        proxy.set_latency(0.0)
    assert proxy.stats.delayed_chunks >= 3


def test_framer_counts_reply_ends_across_chunk_boundaries() -> None:
    f = _Framer("postgres")
    ready = b"Z" + (5).to_bytes(4, "big") + b"I"
    complete = b"C" + (13).to_bytes(4, "big") + b"SELECT 1\x00"
    stream = complete + ready + complete + ready
    assert sum(f.feed(stream[i : i + 3]) for i in range(0, len(stream), 3)) == 2
    # TDS: a two-packet message ends once, at the packet flagged end-of-message.
    t = _Framer("tds")
    packet = bytes([4, 0]) + (10).to_bytes(2, "big") + bytes(4) + b"ab"
    last = bytes([4, 1]) + (10).to_bytes(2, "big") + bytes(4) + b"cd"
    assert t.feed(packet) == 0 and t.feed(last[:5]) == 0 and t.feed(last[5:]) == 1
    # SSLRequest's one-byte answer is skipped, not read as a message header.
    s = _Framer("postgres")
    s.raw_bytes = 1
    assert s.feed(b"N" + ready) == 1
