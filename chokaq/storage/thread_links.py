"""Each database thread's own driver connection for the hot path (see executor.py).

A thread's connection (its link) is taken from the engine once and detached from its pool, so it has
exactly the pool's set-up: connect arguments and timeouts, SQL Server's login timeout, SET
LOCK_TIMEOUT and token sign-in, SQLite's pragmas. It is kept in autocommit (SQLite: the executor
opens BEGIN IMMEDIATE per call, as the engine does). A link that broke is dropped, and the thread's
next call connects again; a disconnect anywhere retires every older link, as SQLAlchemy's pool
does. A link a call is using is closed by its own thread when the call ends, never under it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import Connection, Engine

from chokaq.storage.dialects import profile_of
from chokaq.storage.driver_errors import broken, driver_error


class Link:
    """One thread's connection: the detached SQLAlchemy connection (which closes the driver's when
    closed) and the driver connection itself. ``owner`` None: a pooled connection lent for one
    statement (see pooled_statement.py), which the pool, not the link, closes."""

    __slots__ = ("born", "lock", "owner", "pid", "raw", "retired")

    def __init__(self, owner: Connection | None, raw: Any = None) -> None:
        self.owner = owner
        self.raw: Any = owner.connection.dbapi_connection if owner is not None else raw
        self.pid = os.getpid()
        self.born = time.monotonic()
        self.lock = threading.Lock()  # held by its thread while a call uses it (see ThreadLinks._held)
        self.retired = False  # ThreadLinks.close ran: closed by whoever holds it last

    def close(self) -> None:
        if self.owner is not None:
            with contextlib.suppress(Exception):  # already broken: nothing left to close cleanly
                self.owner.close()


class ThreadLinks:
    """Per-thread driver connections over ``engine``'s connection set-up. Thread-safe."""

    def __init__(self, engine: Engine) -> None:
        # A pool of its own over the engine's creator and connect-time set-up (as the SQL Server
        # autocommit twin is made): every link is a fresh connection, never one that went stale
        # in the shared pool, and the shared pool's count is left alone.
        self.engine = Engine(engine.pool.recreate(), engine.dialect, engine.url)
        self.dialect = engine.dialect
        # Links run single statements in autocommit, except where every write takes its own
        # transaction (SQLite's BEGIN IMMEDIATE: see Executor.transaction).
        self._autocommit = profile_of(self.dialect).autocommit_statements
        self._local = threading.local()
        self._links: list[Link] = []
        self._lock = threading.Lock()
        # When a connection last broke: links older than that are replaced before their next use,
        # as SQLAlchemy's pool recycles every connection older than a disconnect it saw (a broken
        # link usually means the server restarted or failed over, and the others broke too).
        self._invalidated_at = float("-inf")

    @property
    def invalidated_at(self) -> float:
        """When a connection last broke, here or on a worker's loop (loop_transport.py)."""
        return self._invalidated_at

    def disconnected(self) -> None:
        """A connection broke: every connection made before now, the threads' and the loop
        transport's, is replaced before its next statement."""
        self._invalidated_at = time.monotonic()

    def connect(self) -> None:
        """Open this thread's connection now rather than at its first statement."""
        self._link()

    @contextlib.contextmanager
    def _held(self) -> Iterator[Link]:
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

    def _call(self, link: Link, fn: Callable[[], Any]) -> None:
        """A driver call other than a statement (autocommit, BEGIN, COMMIT), its error raised as
        SQLAlchemy raises it."""
        try:
            fn()
        except self.dialect.loaded_dbapi.Error as exc:
            raise self._wrapped(exc, link, None, "", None) from exc

    def _wrapped(self, exc: Any, link: Link, cursor: Any, sql: str, values: Any) -> Exception:
        """The error as SQLAlchemy raises it; a connection that broke is dropped."""
        wrapped, invalidated = driver_error(self.dialect, exc, link.raw, cursor, sql, values)
        if invalidated:
            self.disconnected()
        if invalidated or broken(link.raw):
            self._drop(link)
        return wrapped

    def _link(self) -> Link:
        link: Link | None = getattr(self._local, "link", None)
        if link is not None and link.pid == os.getpid():
            if link.born > self._invalidated_at:
                return link
            self._drop(link)
        # Connect through the engine: connect errors are raised and classified as before, and the
        # pool's connect-time set-up runs. Detached, the connection no longer counts in the pool.
        owner = self.engine.connect()
        try:
            owner.detach()
            link = Link(owner)
            if self._autocommit and not link.raw.autocommit:
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

    def _drop(self, link: Link) -> None:
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
