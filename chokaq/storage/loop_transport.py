"""PostgreSQL: the worker's claims and completions on its own event loop, through psycopg's
``AsyncConnection``, instead of on a database thread.

Why: a call through a database thread costs two thread wake-ups (the loop hands the call to a
thread, the thread hands the result back). On two busy cores each waited 0.26 ms at the median
(0.33-0.36 ms mean) in a benchmark round (C=40), measured, against a claim whose driver call took 2.3-2.6 ms:
a fifth of the claim cycle that bounds a worker's throughput, plus the threads' own CPU. On the
loop a reply is one socket readiness event.

What stays the same as on the threads (executor.py, transactions.py): the statements, rendered once
per shape by the same :class:`Executor` (so the SQL text and parameter order are SQLAlchemy's); the
connection parameters, those the engine itself connected with (its URL, its ``connect_args``: the
timeouts and TCP keepalives of ``postgresql_connect_args``; see connect_args.py); autocommit; driver
errors raised as SQLAlchemy raises them, with its disconnect test; and the replay loop itself
(replay.py: the replays, their delays, the lost-reply rule and the test hook ``fault_injector``),
which this module drives with :meth:`Replay.run_async`. This module owns the loop's connections.

Only PostgreSQL: sqlite3 and pyodbc have no asynchronous driver, and their calls keep the threads.
A transport belongs to one event loop (psycopg's asynchronous connections do): the worker makes it when
it starts and closes it when it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.exc import DBAPIError

from chokaq.storage.connect_args import ConnectArgs
from chokaq.storage.driver_errors import broken, driver_error
from chokaq.storage.executor_sql import Rows
from chokaq.storage.replay import Ambiguity, Replay
from chokaq.storage.transactions import Transactions

if TYPE_CHECKING:
    from psycopg import AsyncConnection

__all__ = ["ConnectArgs", "LoopSession", "LoopTransport", "loop_supported"]
T = TypeVar("T")


class LoopSession:
    """One attempt's connection, for a call of several statements (a producer's enqueue: see
    loop_enqueue.py). ``replaying``: an earlier attempt of this call may have committed behind a
    lost reply (enqueues look before they write, as on the threads)."""

    def __init__(self, transport: LoopTransport, conn: AsyncConnection[Any], replaying: bool) -> None:
        self._transport = transport
        self._conn = conn
        self.replaying = replaying

    async def run(self, stmt: Any, params: Mapping[str, Any]) -> Rows:
        return await self._transport._execute(self._conn, stmt, params, prepare=True)

    async def run_many(self, stmt: Any, rows: Sequence[Mapping[str, Any]]) -> None:
        """``stmt`` once per row (all shaped alike), pipelined by psycopg: one round trip's wait."""
        await self._transport._execute_many(self._conn, stmt, rows)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """A transaction (a savepoint inside one): committed when the block ends, rolled back when
        it raises. A failed COMMIT is raised as SQLAlchemy raises driver errors."""
        import psycopg

        try:
            async with self._conn.transaction():
                yield
        except psycopg.Error as exc:
            raise self._transport._wrapped(exc, self._conn, None, "COMMIT", None) from exc


class LoopTransport:
    """Runs hot-path statements on the running event loop. One connection per call in flight (a
    worker has at most three: two fetchers and the completer), kept between calls."""

    def __init__(
        self, tx: Transactions, connect_args: tuple[Sequence[Any], Mapping[str, Any]], *, limit: int | None = None
    ) -> None:
        self.tx = tx
        self.executor = tx.executor
        self.dialect = tx.executor.dialect
        self._connect_args = connect_args
        self._idle: list[tuple[AsyncConnection[Any], float]] = []  # (connection, when it connected)
        self._busy: set[AsyncConnection[Any]] = set()
        self._closed = False
        self._finishing: set[asyncio.Task[Rows]] = set()  # statements let finish (see run)
        # Calls in flight (connections) at once, where the callers are many (a web app's producers).
        self._limit = asyncio.Semaphore(limit) if limit is not None else None

    async def call(self, work: Callable[[LoopSession], Awaitable[T]], *, op: str, seen: Ambiguity) -> T:
        """``work`` with one connection (autocommit: its statements run alone unless it opens
        :meth:`LoopSession.transaction`), replayed whole on transient errors as
        :meth:`Transactions.retrying` replays a transaction function; ``seen`` as in :meth:`run`."""

        def lost() -> None:
            seen.ambiguous = True

        replay = Replay(self.tx.replays, op, lost)

        async def once() -> T:
            conn, born = await self._take()
            keep = False
            try:
                replay.sending()  # statements go out from the first one on
                result = await work(LoopSession(self, conn, replay.unheard))
            except DBAPIError:
                keep = not broken(conn)
                raise
            else:
                keep = True
                return result
            finally:
                await self._give_back(conn, born, keep)

        if self._limit is None:
            return await replay.run_async(once)
        async with self._limit:
            return await replay.run_async(once)

    async def run(
        self,
        stmt: Any,
        params: Mapping[str, Any],
        *,
        op: str,
        seen: Ambiguity,
        prepare: bool = True,
        finish: bool = False,
    ) -> Rows:
        """One writing statement by itself (autocommit), replayed on transient errors as
        :meth:`Transactions.run_statement` replays it. ``seen.ambiguous`` is set when an attempt may have
        committed behind a lost reply. ``prepare``: see :meth:`Executor.run`.

        ``finish``: a caller cancelled while the call runs does not cancel it (psycopg would cancel
        the statement on the server): the call, replays included, goes on to its end, as a thread
        would take it there. A completion is run so: the handler's work is done, and a cancelled
        archive move would leave its job Processing for the sweep. :meth:`close` waits for such
        calls. A claim is not: cancelled on the server it claims nothing, and one that still
        committed is reported ambiguous."""

        def lost() -> None:
            seen.ambiguous = True

        replay = Replay(self.tx.replays, op, lost)
        call = replay.run_async(lambda: self._once(stmt, params, prepare=prepare, sending=replay.sending))
        if not finish:
            return await call
        task = asyncio.ensure_future(call)
        self._finishing.add(task)
        task.add_done_callback(self._finish_ended)
        return await asyncio.shield(task)

    def _finish_ended(self, task: asyncio.Task[Rows]) -> None:
        self._finishing.discard(task)
        if not task.cancelled():
            # Its waiter may be gone (a shield drops its own callback once cancelled): retrieved
            # here, so an error is never reported as unretrieved.
            task.exception()

    async def _once(self, stmt: Any, params: Mapping[str, Any], *, prepare: bool, sending: Callable[[], None]) -> Rows:
        conn, born = await self._take()
        keep = False
        try:
            sending()  # from here on a failure may come after the server ran the statement
            rows = await self._execute(conn, stmt, params, prepare=prepare)
        except DBAPIError:
            keep = not broken(conn)  # the server refused the statement: the connection is fine
            raise
        else:
            keep = True
            return rows
        finally:
            await self._give_back(conn, born, keep)

    async def _give_back(self, conn: AsyncConnection[Any], born: float, keep: bool) -> None:
        """``conn`` back among the idle ones, or closed: anything but a clean end (a cancel while a
        statement was out, a bug) leaves its state unknown, so it is not used again."""
        self._busy.discard(conn)
        if keep and not self._closed and not conn.info.transaction_status:
            self._idle.append((conn, born))
        else:
            await _close_quietly(conn)

    async def _execute(
        self, conn: AsyncConnection[Any], stmt: Any, params: Mapping[str, Any], *, prepare: bool
    ) -> Rows:
        """The statement on ``conn``: rows by position, driver errors raised as SQLAlchemy raises them."""
        import psycopg

        rendered = self.executor.rendered(stmt, params)
        values = rendered.bind(params)
        cursor = None
        try:
            cursor = conn.cursor()
            await cursor.execute(rendered.sql, values, prepare=prepare)
            fetched = await cursor.fetchall() if rendered.returns_rows or cursor.description else []
            return rendered.rows(fetched)
        except psycopg.Error as exc:
            raise self._wrapped(exc, conn, cursor, rendered.sql, values) from exc
        finally:
            if cursor is not None:
                with contextlib.suppress(Exception):
                    await cursor.close()

    async def _execute_many(self, conn: AsyncConnection[Any], stmt: Any, rows: Sequence[Mapping[str, Any]]) -> None:
        import psycopg

        rendered = self.executor.rendered(stmt, rows[0])
        values = [rendered.bind(r) for r in rows]
        cursor = None
        try:
            cursor = conn.cursor()
            await cursor.executemany(rendered.sql, values)
        except psycopg.Error as exc:
            raise self._wrapped(exc, conn, cursor, rendered.sql, None) from exc
        finally:
            if cursor is not None:
                with contextlib.suppress(Exception):
                    await cursor.close()

    def abandon(self) -> None:
        """Close every connection without the loop (it has ended, or is not this thread's): the
        sockets close; the server rolls back whatever was open on them."""
        self._closed = True
        conns = [c for c, _ in self._idle] + list(self._busy)
        self._idle, self._busy = [], set()
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.pgconn.finish()

    async def _take(self) -> tuple[AsyncConnection[Any], float]:
        if self._closed:
            # A task left running past the worker's stop (a bug elsewhere): it must not claim.
            raise RuntimeError("the worker's loop transport is closed")
        while self._idle:
            conn, born = self._idle.pop()
            # A disconnect seen here or on a thread retires every older connection: it usually
            # means a restart or a failover, and they broke too.
            if born > self.executor.invalidated_at and not broken(conn):
                self._busy.add(conn)
                return conn, born
            await _close_quietly(conn)
        import psycopg

        args, kwargs = self._connect_args
        born = time.monotonic()
        try:
            conn = await psycopg.AsyncConnection.connect(*args, **{**kwargs, "autocommit": True})
        except psycopg.Error as exc:
            raise self._wrapped(exc, None, None, "", None) from exc
        self._busy.add(conn)
        return conn, born

    def _wrapped(self, exc: Any, conn: Any, cursor: Any, sql: str, values: Any) -> Exception:
        """The error as SQLAlchemy raises it; a disconnect retires every older connection."""
        wrapped, invalidated = driver_error(self.dialect, exc, conn, cursor, sql, values)
        if invalidated:
            self.executor.disconnected()
        return wrapped

    async def close(self, grace: float = 15.0) -> None:
        """Close every connection (the worker's loop is about to end), after the statements let
        finish (see :meth:`run`) have, for ``grace`` seconds at most."""
        self._closed = True
        if self._finishing:
            await asyncio.wait(set(self._finishing), timeout=grace)
        idle, self._idle = self._idle, []
        for conn, _ in idle:
            await _close_quietly(conn)
        busy, self._busy = self._busy, set()
        for conn in busy:
            await _close_quietly(conn)


async def _close_quietly(conn: AsyncConnection[Any]) -> None:
    try:
        await conn.close()
    except Exception:  # already broken: nothing left to close cleanly
        return


def loop_supported() -> bool:
    """Whether the running loop can host psycopg's asynchronous connections: not Windows'
    ProactorEventLoop (asyncio's default there), which psycopg refuses."""
    proactor = getattr(asyncio, "ProactorEventLoop", None)
    return proactor is None or not isinstance(asyncio.get_running_loop(), proactor)
