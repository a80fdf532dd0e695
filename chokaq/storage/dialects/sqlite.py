"""SQLite (the embedded default): everything chokaq does differently there.

- Connections: no pool worth having (each connection is a file handle, and forked workers must not
  share one); WAL, a busy timeout and foreign keys per connection; writers take the lock up front
  (``BEGIN IMMEDIATE``), readers do not.
- No schemas: chokaq's schema is translated away on every connection.
- No connection to lose: a failed statement always rolled back, so no reply is ever in doubt.
- Every write, even a single statement, runs in its own ``BEGIN IMMEDIATE`` transaction; a
  finishing move is copy, delete and counter bump inside one.
- Errors worth a replay: "database is locked" / "database is busy".
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from typing import Any

from sqlalchemy import Column, Connection, Engine, Table, create_engine, event, inspect, text
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import URL, Dialect
from sqlalchemy.pool import NullPool
from sqlalchemy.sql.elements import ColumnElement

from chokaq.storage.dialects.base import EngineOptions, Profile, nullable_column, on_conflict_upsert
from chokaq.storage.dialects.search_indexes import create_sqlite_search, fts_search, sqlite_fts
from chokaq.storage.schema import SCHEMA


class SqliteProfile(Profile):
    name = "sqlite"
    label = "sqlite"
    extra = "sqlite"
    schemas = False
    lost_replies = False
    autocommit_statements = False
    queries_script = False

    def build_engine(self, url: URL, options: EngineOptions) -> Engine:
        return _sqlite_engine(url, echo=options.echo)

    def transient(self, exc: BaseException) -> bool:
        text_ = " ".join(str(a) for a in getattr(exc, "args", ()))
        return type(exc).__name__ == "OperationalError" and (
            "database is locked" in text_ or "database is busy" in text_
        )

    def ddl_dialect(self) -> Dialect:
        return sqlite.pysqlite.dialect()

    def bind(self, conn: Connection) -> Connection:
        conn.execution_options(schema_translate_map={SCHEMA: None})
        return conn

    def upsert_statement(self, table: Table, values: Mapping[str, Any], keep: Collection[str] = ()) -> Any:
        return on_conflict_upsert(sqlite.insert, table, values, keep)

    def add_column(self, conn: Connection, table: Table, column: Column[Any]) -> None:
        if column.name in {c["name"] for c in inspect(conn).get_columns(table.name)}:
            return
        _, definition = nullable_column(conn, table, column)  # no schemas: the bare table name
        conn.execute(text(f"ALTER TABLE {conn.dialect.identifier_preparer.quote(table.name)} ADD COLUMN {definition}"))

    def create_search_indexes(self, conn: Connection) -> None:
        create_sqlite_search(conn)

    def search_script(self) -> list[str]:
        return sqlite_fts()

    def dlq_search(self, needle: str) -> ColumnElement[bool] | None:
        return fts_search(needle)

    # The migration lock: the engine opens write transactions with BEGIN IMMEDIATE, which is it.


def _sqlite_engine(url: URL, *, echo: bool) -> Engine:
    # Each connection is a file handle; pooling them buys little and NullPool keeps forked
    # worker processes from sharing one.
    engine = create_engine(
        url,
        poolclass=NullPool,
        connect_args={"timeout": 30, "check_same_thread": False},
        execution_options={"schema_translate_map": {SCHEMA: None}},
        echo=echo,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the sqlite3 module, decide when transactions begin.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA busy_timeout=30000")
        _enable_wal(cur)
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Writers take the lock up front: a deferred transaction that later writes can fail
        # with SQLITE_BUSY instead of waiting, which would turn into spurious retries.
        mode = "DEFERRED" if conn.get_execution_options().get("chokaq_readonly") else "IMMEDIATE"
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


def _enable_wal(cur: Any) -> None:
    """Switch a SQLite file to WAL. Switching needs a moment alone with the file and SQLite answers
    "database is locked" at once, without its busy handler, when several processes open a new file
    together; the mode is stored in the file, so it is enough that one of them succeeds."""
    import sqlite3

    for attempt in range(50):
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
                return
            time.sleep(0.01 * (attempt + 1))
    cur.execute("PRAGMA journal_mode=WAL")
