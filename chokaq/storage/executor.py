"""The hot path's own driver connections: claim, start, heartbeat and the finishing moves, straight
through the driver (psycopg, pyodbc, sqlite3).

Each database thread keeps one connection of its own, in autocommit (SQLite: BEGIN IMMEDIATE per
call, as the engine does), taken from the engine once and detached from its pool, so it has exactly
the pool's set-up: connect arguments and timeouts, SQL Server's login timeout, SET LOCK_TIMEOUT and
token sign-in, SQLite's pragmas. Statements come from the same SQLAlchemy builders, rendered once
per shape (executor_sql.py); rows come back as plain tuples, by position. On PostgreSQL they are
prepared at their first use (SQLAlchemy's path prepares only after psycopg's fifth), the claim
where JobsHot's statistics are kept current: see :meth:`Executor.run`.

Driver errors are raised as SQLAlchemy raises them (``DBAPIError.instance``, with
``connection_invalidated`` from the dialect's own disconnect test), so Storage's replay rules,
``is_transient`` and the lost-reply bookkeeping see exactly what they saw before. A connection that
broke is dropped, and the thread's next call connects again.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError

from chokaq.domain.errors import ConfigurationError
from chokaq.storage.dialects.sqlserver_errors import missing_odbc_driver
from chokaq.storage.executor_sql import Rendered, expanding_names, render

Rows = list[tuple[Any, ...]]


def _broken(raw: Any) -> bool:
    """Whether a driver connection can no longer be used (psycopg's ``closed`` or ``broken``)."""
    return bool(getattr(raw, "closed", False)) or bool(getattr(raw, "broken", False))


def driver_error(dialect: Dialect, exc: Any, raw: Any, cursor: Any, sql: str, values: Any) -> tuple[Exception, bool]:
    """A driver error as SQLAlchemy raises it (``DBAPIError.instance``), and whether the dialect's
    disconnect test says the connection is gone (``connection_invalidated``)."""
    invalidated = bool(dialect.is_disconnect(exc, raw, cursor))
    wrapped: Exception = DBAPIError.instance(
        sql, values, exc, dialect.loaded_dbapi.Error, connection_invalidated=invalidated, dialect=dialect
    )
    return wrapped, invalidated


class _Link:
    """One thread's connection: the detached SQLAlchemy connection (which closes the driver's when
    closed) and the driver connection itself. ``owner`` None: a pooled connection lent for one
    statement (see Executor.run_pooled), which the pool, not the link, closes."""

    __slots__ = ("born", "lock", "owner", "pid", "raw", "retired")

    def __init__(self, owner: Connection | None, raw: Any = None) -> None:
        self.owner = owner
        self.raw: Any = owner.connection.dbapi_connection if owner is not None else raw
        self.pid = os.getpid()
        self.born = time.monotonic()
        self.lock = threading.Lock()  # held by its thread while a call uses it (see Executor._held)
        self.retired = False  # Executor.close ran: closed by whoever holds it last

    def close(self) -> None:
        if self.owner is not None:
            with contextlib.suppress(Exception):  # already broken: nothing left to close cleanly
                self.owner.close()


class Transaction:
    """Statements of one SQLite transaction (BEGIN IMMEDIATE ... COMMIT) on the thread's link."""

    def __init__(self, executor: Executor, link: _Link) -> None:
        self._executor = executor
        self._link = link

    def run(self, stmt: Any, params: Mapping[str, Any]) -> tuple[Rows, int]:
        """Rows and rowcount of one statement."""
        return self._executor._execute(self._link, stmt, params)


class Executor:
    """Runs pre-rendered statements on per-thread driver connections. Thread-safe."""

    def __init__(self, engine: Engine, schema_translate_map: Mapping[str | None, str | None] | None = None) -> None:
        # A pool of its own over the engine's creator and connect-time set-up (as the SQL Server
        # autocommit twin is made): every link is a fresh connection, never one that went stale
        # in the shared pool, and the shared pool's count is left alone.
        self.engine = Engine(engine.pool.recreate(), engine.dialect, engine.url)
        self.dialect = engine.dialect
        self._map = schema_translate_map
        self._pg = self.dialect.name == "postgresql"
        self._sqlite = self.dialect.name == "sqlite"
        self._shapes: dict[Any, tuple[tuple[str, ...], dict[tuple[int, ...], Rendered]]] = {}
        self._local = threading.local()
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        # When a connection last broke: links older than that are replaced before their next use,
        # as SQLAlchemy's pool recycles every connection older than a disconnect it saw (a broken
        # link usually means the server restarted or failed over, and the others broke too).
        self._invalidated_at = float("-inf")

    # ----------------------------------------------------------------- statements
    def rendered(self, stmt: Any, params: Mapping[str, Any]) -> Rendered:
        """``stmt`` rendered for parameters shaped like ``params`` (once per shape)."""
        shape = self._shapes.get(stmt)
        if shape is None:
            shape = self._shapes[stmt] = (expanding_names(stmt, self.dialect, self._map), {})
        expanding, done = shape
        key = tuple(len(params[n]) for n in expanding)
        found = done.get(key)
        if found is None:
            found = done[key] = render(stmt, self.dialect, params, self._map)
        return found

    # ----------------------------------------------------------------- running
    def run(self, stmt: Any, params: Mapping[str, Any], *, sending: Callable[[], None], prepare: bool = True) -> Rows:
        """Run one writing statement by itself (autocommit; SQLite in its own transaction) and
        return its rows. ``sending`` is called once the connection is there, just before the
        statement goes out: from then on a failure may come after the server ran it.

        ``prepare`` (PostgreSQL): the claim is prepared only where the statistics check keeps
        JobsHot's statistics current (Claimer). Planning is half of an idle claim (1.7 ms against
        0.9 ms prepared, measured), which is enqueue -> start latency. But an unprepared claim is
        planned from the table's current size every time, while a prepared one may run a generic
        plan made when the table was small, until an ANALYZE makes PostgreSQL plan it again.
        Statements by key (start, heartbeat, moves) have one plan and are always prepared."""
        if self._sqlite:
            with self.transaction(sending=sending) as tx:
                return tx.run(stmt, params)[0]
        with self._held() as link:
            sending()
            return self._execute(link, stmt, params, prepare=prepare)[0]

    def run_pooled(self, pool: Engine, stmt: Any, params: Mapping[str, Any], *, sending: Callable[[], None]) -> Rows:
        """Run one writing statement by itself (autocommit) on a connection checked out of
        ``pool`` and returned to it, not on this thread's link: for producers (an enqueue), whose
        threads are the application's and may be many, so their connections stay bounded by the
        pool. PostgreSQL and SQL Server only (SQLite keeps its BEGIN IMMEDIATE transaction).

        Against SQLAlchemy's own execution of the same statement this leaves out the execution
        context, the compile-cache lookup and the two isolation-level switches around it: about
        250 µs of a producer's CPU per enqueue, measured, where the driver's own share is 50 µs.
        A connection that broke is invalidated, so the pool never hands it out again."""
        fairy = self._checkout(pool)
        switched = False
        try:
            raw: Any = fairy.dbapi_connection
            link = _Link(None, raw)
            if not raw.autocommit:
                # psycopg switches client-side, no round trip; the pool's other users expect a
                # transaction, so it is switched back below. SQL Server's twin stays in autocommit.
                self._call(link, lambda: setattr(raw, "autocommit", True))
                switched = True
            sending()
            return self._execute(link, stmt, params)[0]
        except DBAPIError as exc:
            if exc.connection_invalidated:
                # As SQLAlchemy does on a disconnect: every connection the pool made before now is
                # replaced at its next check-out (the server restarted or failed over, and they
                # broke too), so a replay does not meet another dead one.
                pool.pool._invalidate(fairy, exc.orig if isinstance(exc.orig, BaseException) else None)
            elif _broken(fairy.dbapi_connection):
                fairy.invalidate()
            raise
        except BaseException:
            # Anything else (Ctrl-C, a bug in binding): the connection's state is not known, so
            # it is not handed out again; SQLAlchemy does so for exit exceptions only, and a
            # reconnect is all this costs.
            fairy.invalidate()
            raise
        finally:
            if switched and fairy.dbapi_connection is not None:
                try:
                    fairy.dbapi_connection.autocommit = False
                except Exception:
                    # Never back in the pool in autocommit: its next user's transaction would not be one.
                    fairy.invalidate()
            fairy.close()

    def _checkout(self, pool: Engine) -> Any:
        """A pooled connection, connect errors raised as the engine raises them (classified
        transient or not by the same rules)."""
        try:
            return pool.raw_connection()
        except self.dialect.loaded_dbapi.Error as exc:
            # raw_connection() bypasses the engine's handle_error hook, which names a missing
            # ODBC driver (build_engine): named here the same way.
            message = missing_odbc_driver(exc)
            if message is not None:
                raise ConfigurationError(message) from exc
            raise DBAPIError.instance(
                None,
                None,
                exc,
                self.dialect.loaded_dbapi.Error,
                connection_invalidated=bool(self.dialect.is_disconnect(exc, None, None)),
                dialect=self.dialect,
            ) from exc

    @contextlib.contextmanager
    def transaction(self, *, sending: Callable[[], None]) -> Iterator[Transaction]:
        """SQLite: one BEGIN IMMEDIATE transaction (writers take the lock up front, as the engine's
        ``begin`` hook does), committed when the block ends and rolled back when it raises."""
        with self._held() as link:
            sending()
            self._call(link, lambda: link.raw.execute("BEGIN IMMEDIATE"))
            try:
                yield Transaction(self, link)
            except BaseException:
                with contextlib.suppress(Exception):  # the block's own error is the one to report
                    link.raw.rollback()
                raise
            self._call(link, link.raw.commit)

    @contextlib.contextmanager
    def _held(self) -> Iterator[_Link]:
        """This thread's link, held for one call. A :meth:`close` from another thread meanwhile (a
        Storage closed while a stopped worker's thread still finishes a heartbeat) leaves the link
        to this thread, which closes it when the call ends: a driver connection closed under a
        running call crashed the process once (CI, a segmentation fault in libpq)."""
        link = self._link()
        with link.lock:
            try:
                yield link
            finally:
                if link.retired:
                    link.close()

    def _execute(self, link: _Link, stmt: Any, params: Mapping[str, Any], *, prepare: bool = True) -> tuple[Rows, int]:
        rendered = self.rendered(stmt, params)
        values = rendered.bind(params)
        cursor = link.raw.cursor()
        try:
            if rendered.inputsizes is not None:
                cursor.setinputsizes(rendered.inputsizes)
            if self._pg:
                cursor.execute(rendered.sql, values, prepare=prepare)
            else:
                cursor.execute(rendered.sql, values)
            fetched = cursor.fetchall() if rendered.returns_rows or cursor.description else []
            return rendered.rows(fetched), cursor.rowcount
        except self.dialect.loaded_dbapi.Error as exc:
            raise self._wrapped(exc, link, cursor, rendered.sql, values) from exc
        finally:
            with contextlib.suppress(Exception):
                cursor.close()

    def _call(self, link: _Link, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except self.dialect.loaded_dbapi.Error as exc:
            raise self._wrapped(exc, link, None, "", None) from exc

    def _wrapped(self, exc: Any, link: _Link, cursor: Any, sql: str, values: Any) -> Exception:
        """The error as SQLAlchemy raises it; a connection that broke is dropped."""
        wrapped, invalidated = driver_error(self.dialect, exc, link.raw, cursor, sql, values)
        if invalidated:
            self.disconnected()
        if invalidated or _broken(link.raw):
            self._drop(link)
        return wrapped

    # ----------------------------------------------------------------- connections
    @property
    def invalidated_at(self) -> float:
        """When a connection last broke, here or on a worker's loop (loop_driver.py)."""
        return self._invalidated_at

    def disconnected(self) -> None:
        """A connection broke: every connection made before now, the threads' and the loop
        drivers', is replaced before its next statement."""
        self._invalidated_at = time.monotonic()

    def connect(self) -> None:
        """Open this thread's connection now rather than at its first statement."""
        self._link()

    def _link(self) -> _Link:
        link: _Link | None = getattr(self._local, "link", None)
        if link is not None and link.pid == os.getpid():
            if link.born > self._invalidated_at:
                return link
            self._drop(link)
        # Connect through the engine: connect errors are raised and classified as before, and the
        # pool's connect-time set-up runs. Detached, the connection no longer counts in the pool.
        owner = self.engine.connect()
        try:
            owner.detach()
            link = _Link(owner)
            if not self._sqlite and not link.raw.autocommit:
                # A pooled connection may have broken while it sat in the pool: raised as the
                # engine raises a dropped connection (invalidated, so the call is replayed).
                self._call(link, lambda: setattr(link.raw, "autocommit", True))
        except BaseException:
            owner.close()
            raise
        self._local.link = link
        with self._lock:
            self._links.append(link)
        return link

    def _drop(self, link: _Link) -> None:
        if getattr(self._local, "link", None) is link:
            self._local.link = None
        with self._lock:
            if link in self._links:
                self._links.remove(link)
        link.close()

    def close(self) -> None:
        """Close every thread's connection; one that a call is using is closed by its thread when
        that call ends (see :meth:`_held`)."""
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            if link.pid == os.getpid():
                link.retired = True  # first: a call ending now sees it and closes the link itself
                if link.lock.acquire(blocking=False):
                    try:
                        link.close()  # closing twice (here and by its thread) is harmless
                    finally:
                        link.lock.release()
        self._local = threading.local()
        self.engine.dispose()
