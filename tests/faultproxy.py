"""A loopback TCP proxy that the test drives to break the database connection in the ways a
network and a failing-over database do.

It sits between chokaq and the real database server (PostgreSQL; SQL Server's TDS framing too)
and runs an asyncio loop in a background thread. Every fault is switched on by the test, never by
a timer racing the worker:

1. :meth:`FaultProxy.swallow_next_reply`: the next request sent on any connection reaches the
   server and runs; the server's reply is dropped up to its end (PostgreSQL ReadyForQuery, the
   TDS end-of-message packet) and the connection is cut. The client cannot tell whether its
   statement committed.
2. :meth:`FaultProxy.cut_all`: every open connection is reset.
3. :meth:`FaultProxy.refuse`: the port stops listening (connections are refused) and every open
   connection is reset, for ``seconds``: the database is down.
4. :meth:`FaultProxy.blackhole`: connections are accepted and nothing is forwarded either way,
   for ``seconds``; at the end the black-holed connections are reset, as the failed-over server
   no longer knows them.
5. :meth:`FaultProxy.set_latency`: each chunk the server sends waits ``seconds`` first.

PostgreSQL connections must not use TLS (``sslmode=disable``): the proxy reads message
boundaries to know where a reply ends. :meth:`FaultProxy.url` rewrites a URL accordingly.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import pytest
from sqlalchemy.engine import make_url

T = TypeVar("T")
Protocol = Literal["postgres", "tds"]

# PostgreSQL's SSLRequest and GSSENCRequest: the server answers each with one unframed byte.
_PG_NEGOTIATION_CODES = {80877103, 80877104}


class _Framer:
    """Splits one direction's byte stream into protocol messages, to find where a reply ends."""

    def __init__(self, protocol: Protocol) -> None:
        self.protocol = protocol
        self.buf = bytearray()
        self.raw_bytes = 0  # unframed bytes still expected (PostgreSQL's answer to SSLRequest)

    def feed(self, data: bytes) -> int:
        """Add bytes; return how many complete "end of reply" messages they finished."""
        ends = 0
        view = memoryview(data)
        if self.raw_bytes:
            skip = min(self.raw_bytes, len(view))
            self.raw_bytes -= skip
            view = view[skip:]
        self.buf += view
        while True:
            if self.protocol == "postgres":
                if len(self.buf) < 5:
                    break
                size = 1 + int.from_bytes(self.buf[1:5], "big")
                if len(self.buf) < size:
                    break
                if self.buf[0] == ord("Z"):  # ReadyForQuery: the server is done with the request
                    ends += 1
            else:
                if len(self.buf) < 8:
                    break
                size = int.from_bytes(self.buf[2:4], "big")
                if size < 8 or len(self.buf) < size:
                    break
                if self.buf[1] & 0x01:  # status EOM: the last packet of this message
                    ends += 1
            del self.buf[:size]
        return ends


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    framer: _Framer
    # PostgreSQL: ready after the first ReadyForQuery (start-up done). TDS: after pre-login and
    # login answers. Only requests on ready links are swallowed: they are the statements.
    ends_seen: int = 0
    ready_after: int = 1
    swallowing: asyncio.Future[None] | None = None
    blackholed: bool = False
    closed: bool = False
    first_client_chunk: bool = True

    @property
    def ready(self) -> bool:
        return self.ends_seen >= self.ready_after

    def abort(self) -> None:
        if self.closed:
            return
        self.closed = True
        for w in (self.client, self.server):
            with contextlib.suppress(Exception):
                w.transport.abort()


@dataclass
class ProxyStats:
    accepted: int = 0
    swallowed: int = 0
    cut: int = 0
    refused_windows: int = 0
    blackholed_windows: int = 0
    delayed_chunks: int = 0
    # Replies that ended a request (PostgreSQL's ReadyForQuery, TDS's end of message) on links
    # past their start-up: the round trips the client made.
    replies: int = 0
    # Connections accepted, per window kind, for the tests of the proxy itself.
    accepted_while_blackholed: int = 0
    details: list[str] = field(default_factory=list)


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int, protocol: Protocol = "postgres") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.protocol: Protocol = protocol
        self.port = 0
        self.stats = ProxyStats()
        self._links: set[_Link] = set()
        self._armed: asyncio.Future[None] | None = None
        self._armed_after = 0
        self._latency = 0.0
        self._blackhole = False
        self._server: asyncio.Server | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)

    # ------------------------------------------------------------------ life cycle
    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def close(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for link in list(self._links):
                link.abort()
            current = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not current]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            self._call(stop())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    def url(self, db_url: str) -> str:
        """``db_url`` pointed at the proxy (PostgreSQL: without TLS, so replies can be framed)."""
        u = make_url(db_url).set(host="127.0.0.1", port=self.port)
        if self.protocol == "postgres":
            u = u.update_query_dict({"sslmode": "disable"})
        return u.render_as_string(hide_password=False)

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port, reuse_address=True, backlog=512)
        self.port = self._server.sockets[0].getsockname()[1]

    # ------------------------------------------------------------------ the faults
    def swallow_next_reply(self, timeout: float = 30.0) -> bool:
        """Mode 1. Block until the next request on any ready connection has been answered by the
        server, its reply dropped and the connection cut; False if no request came in ``timeout``
        (the proxy is disarmed again then)."""
        done = self.arm_swallow()
        swallowed = self.wait_swallowed(done, timeout)
        if not swallowed:
            self.disarm()
        return swallowed

    def arm_swallow(self, after: int = 0) -> asyncio.Future[None]:
        """Mode 1 without blocking: the reply to the request after the next ``after`` ones (on
        ready connections) will be swallowed. Pass the result to :meth:`wait_swallowed`."""

        async def arm() -> asyncio.Future[None]:
            if self._armed is None or self._armed.done():
                self._armed = self._loop.create_future()
            self._armed_after = after
            return self._armed

        return self._call(arm())

    def wait_swallowed(self, done: asyncio.Future[None], timeout: float) -> bool:
        async def wait() -> bool:
            try:
                await asyncio.wait_for(asyncio.shield(done), timeout)
                return True
            except TimeoutError:
                return False

        return self._call(wait(), timeout + 5)

    def disarm(self) -> None:
        async def off() -> None:
            if self._armed is not None and not self._armed.done():
                self._armed.cancel()
            self._armed = None

        self._call(off())

    def cut_all(self) -> int:
        """Mode 2. Reset every open connection; returns how many."""

        async def cut() -> int:
            links = [link for link in self._links if not link.closed]
            for link in links:
                link.abort()
            self.stats.cut += len(links)
            return len(links)

        return self._call(cut())

    @contextlib.contextmanager
    def refusing(self) -> Iterator[None]:
        """Mode 3 while the block runs: nothing listens on the port and open connections are reset."""

        async def down() -> None:
            assert self._server is not None
            self._server.close()
            await self._server.wait_closed()
            self._server = None
            for link in list(self._links):
                link.abort()
            self.stats.refused_windows += 1

        self._call(down())
        try:
            yield
        finally:
            self._call(self._listen())

    @contextlib.contextmanager
    def blackholed(self) -> Iterator[None]:
        """Mode 4 while the block runs: accept, forward nothing; then reset those connections."""

        async def on() -> None:
            self._blackhole = True
            for link in self._links:
                link.blackholed = True
            self.stats.blackholed_windows += 1

        async def off() -> None:
            self._blackhole = False
            for link in list(self._links):
                if link.blackholed:
                    link.abort()

        self._call(on())
        try:
            yield
        finally:
            self._call(off())

    def refuse(self, seconds: float) -> None:
        with self.refusing():
            threading.Event().wait(seconds)

    def blackhole(self, seconds: float) -> None:
        with self.blackholed():
            threading.Event().wait(seconds)

    def set_latency(self, seconds: float) -> None:
        """Mode 5: every chunk from the server waits ``seconds`` before it is passed on."""

        async def put() -> None:
            self._latency = seconds

        self._call(put())

    def open_connections(self) -> int:
        async def count() -> int:
            return sum(1 for link in self._links if not link.closed)

        return self._call(count())

    # ------------------------------------------------------------------ plumbing
    async def _accept(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        self.stats.accepted += 1
        sock = c_writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        blackholed = self._blackhole
        if blackholed:
            self.stats.accepted_while_blackholed += 1
        try:
            s_reader, s_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            c_writer.transport.abort()
            return
        link = _Link(
            client=c_writer,
            server=s_writer,
            framer=_Framer(self.protocol),
            ready_after=1 if self.protocol == "postgres" else 2,
            blackholed=blackholed,
        )
        self._links.add(link)
        try:
            await asyncio.gather(self._client_to_server(link, c_reader), self._server_to_client(link, s_reader))
        finally:
            link.abort()
            self._links.discard(link)

    async def _client_to_server(self, link: _Link, reader: asyncio.StreamReader) -> None:
        while not link.closed:
            try:
                data = await reader.read(65536)
            except (ConnectionError, OSError):
                data = b""
            if not data:
                link.abort()
                return
            if link.first_client_chunk:
                link.first_client_chunk = False
                negotiating = len(data) >= 8 and int.from_bytes(data[4:8], "big") in _PG_NEGOTIATION_CODES
                if self.protocol == "postgres" and negotiating:
                    link.framer.raw_bytes = 1
            if link.blackholed:
                continue  # forwarded nowhere: the request is lost in the hung network
            armed = self._armed
            if armed is not None and not armed.done() and link.ready and link.swallowing is None:
                if self._armed_after > 0:
                    self._armed_after -= 1
                else:
                    # This request will run; its answer will not arrive.
                    link.swallowing = armed
                    self._armed = None
            try:
                link.server.write(data)
                await link.server.drain()
            except (ConnectionError, OSError):
                link.abort()
                return

    async def _server_to_client(self, link: _Link, reader: asyncio.StreamReader) -> None:
        while not link.closed:
            try:
                data = await reader.read(65536)
            except (ConnectionError, OSError):
                data = b""
            if not data:
                link.abort()
                return
            if link.blackholed:
                continue
            ready = link.ready
            ends = link.framer.feed(data)
            link.ends_seen += ends
            if ready:
                self.stats.replies += ends
            if link.swallowing is not None:
                if ends:
                    # The whole reply was read and dropped: the request ran, the client never hears.
                    self.stats.swallowed += 1
                    done, link.swallowing = link.swallowing, None
                    link.abort()
                    if not done.done():
                        done.set_result(None)
                    return
                continue
            if self._latency > 0:
                self.stats.delayed_chunks += 1
                await asyncio.sleep(self._latency)
                if link.closed:
                    return
            try:
                link.client.write(data)
                await link.client.drain()
            except (ConnectionError, OSError):
                link.abort()
                return


def pg_upstream(db_url: str) -> tuple[str, int]:
    u = make_url(db_url)
    return (u.host or "127.0.0.1", int(u.port or 5432))


@pytest.fixture
def fault_proxy() -> Iterator[Callable[[str], FaultProxy]]:
    """``fault_proxy(db_url)`` starts a proxy in front of that database's server; use
    ``proxy.url(db_url)`` for the connections that should go through it."""
    started: list[FaultProxy] = []

    def make(db_url: str) -> FaultProxy:
        backend = make_url(db_url).get_backend_name()
        if backend == "postgresql":
            proxy = FaultProxy(*pg_upstream(db_url), protocol="postgres")
        elif backend == "mssql":
            u = make_url(db_url)
            proxy = FaultProxy(u.host or "127.0.0.1", int(u.port or 1433), protocol="tds")
        else:
            raise ValueError(f"no network between chokaq and {backend}: nothing to proxy")
        started.append(proxy.start())
        return proxy

    yield make
    for proxy in started:
        proxy.close()
