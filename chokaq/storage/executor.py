"""The hot path's statements straight through the driver (psycopg, pyodbc, sqlite3): claim, start,
heartbeat and the finishing moves, on each database thread's own connection (thread_links.py).

Statements come from the same SQLAlchemy builders, rendered once per shape (executor_sql.py); rows
come back as plain tuples, by position. On PostgreSQL they are prepared at their first use
(SQLAlchemy's path prepares only after psycopg's fifth), the claim where JobsHot's statistics are
kept current: see :meth:`Executor.run`. Driver errors are raised as SQLAlchemy raises them
(driver_errors.py), so the replay rules and the lost-reply bookkeeping (replay.py) see exactly
what they see from SQLAlchemy's own execution. A producer's enqueue runs on a pooled connection
instead (pooled_statement.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from sqlalchemy import Engine

from chokaq.storage.dialects import profile_of
from chokaq.storage.executor_sql import Rendered, Rows, expanding_names, render
from chokaq.storage.thread_links import Link, ThreadLinks

__all__ = ["Executor", "Rows", "SqliteTransaction"]


class SqliteTransaction:
    """Statements of one SQLite transaction (BEGIN IMMEDIATE ... COMMIT) on the thread's link,
    opened by :meth:`Executor.transaction`."""

    def __init__(self, execute: Callable[[Any, Mapping[str, Any]], tuple[Rows, int]]) -> None:
        self._execute = execute

    def run(self, stmt: Any, params: Mapping[str, Any]) -> tuple[Rows, int]:
        """Rows and rowcount of one statement."""
        return self._execute(stmt, params)


class Executor(ThreadLinks):
    """Runs pre-rendered statements on per-thread driver connections. Thread-safe. Every statement
    meets the driver in :meth:`_execute` (the benchmarks' statement counter wraps it there)."""

    def __init__(self, engine: Engine, schema_translate_map: Mapping[str | None, str | None] | None = None) -> None:
        super().__init__(engine)
        self._map = schema_translate_map
        self._prepares = profile_of(self.dialect).prepared_statements
        self._shapes: dict[Any, tuple[tuple[str, ...], dict[tuple[int, ...], Rendered]]] = {}

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
        if not self._autocommit:
            with self.transaction(sending=sending) as tx:
                return tx.run(stmt, params)[0]
        with self._held() as link:
            sending()
            return self._execute(link, stmt, params, prepare=prepare)[0]

    @contextlib.contextmanager
    def transaction(self, *, sending: Callable[[], None]) -> Iterator[SqliteTransaction]:
        """SQLite: one BEGIN IMMEDIATE transaction (writers take the lock up front, as the engine's
        ``begin`` hook does), committed when the block ends and rolled back when it raises."""
        with self._held() as link:
            sending()
            self._call(link, lambda: link.raw.execute("BEGIN IMMEDIATE"))
            try:
                yield SqliteTransaction(lambda stmt, params: self._execute(link, stmt, params))
            except BaseException:
                with contextlib.suppress(Exception):  # the block's own error is the one to report
                    link.raw.rollback()
                raise
            self._call(link, link.raw.commit)

    def _execute(self, link: Link, stmt: Any, params: Mapping[str, Any], *, prepare: bool = True) -> tuple[Rows, int]:
        """Rows and rowcount of one statement on ``link``."""
        rendered = self.rendered(stmt, params)
        values = rendered.bind(params)
        cursor = link.raw.cursor()
        try:
            if rendered.inputsizes is not None:
                cursor.setinputsizes(rendered.inputsizes)
            if self._prepares:
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
