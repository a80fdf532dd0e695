"""Engines per database, and which database errors are worth replaying a transaction for."""

from __future__ import annotations

import re
import struct
import time
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.pool import NullPool

from chokaq.domain.errors import ConfigurationError
from chokaq.storage.schema import SCHEMA

# Azure SQL's transient error numbers (throttling, failover, deadlock victim, ...).
MSSQL_TRANSIENT = {1205, 4060, 40197, 40501, 40613, 49918, 49919, 49920, 10928, 10929, 10053, 10054, 10060, 233, -2}
MSSQL_TRANSIENT_SQLSTATES = {"HYT00", "HYT01", "08S01", "08001", "40001"}
PG_TRANSIENT_SQLSTATE_PREFIXES = ("40001", "40P01", "08", "57P01", "57P02", "57P03", "53300", "57014")
# libpq's own words for a connection that failed or broke (no SQLSTATE: the server never answered).
PG_TRANSIENT_CONNECTION_TEXT = (
    "connection refused", "timeout expired", "server closed the connection", "connection reset",
    "connection timed out", "no route to host", "network is unreachable", "the database system is",
)
_NATIVE_NUMBER = re.compile(r"\((-?\d+)\)")

# Token-based sign-in for pyodbc (msodbcsql's SQL_COPT_SS_ACCESS_TOKEN).
SQL_COPT_SS_ACCESS_TOKEN = 1256
AZURE_SQL_SCOPE = "https://database.windows.net/.default"


def build_engine(
    url: str, *, pool_size: int = 10, echo: bool = False, connect_timeout: float = 10.0, statement_timeout: float = 0.0
) -> Engine:
    """Create the engine for ``url`` with what each database needs to behave as a queue."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigurationError(f"storage URL {url!r} is not a valid database URL: {exc}") from None
    backend = parsed.get_backend_name()
    try:
        if backend == "sqlite":
            return _sqlite_engine(url, echo=echo)
        if backend == "postgresql":
            connect_args = postgresql_connect_args(parsed.query, connect_timeout, statement_timeout)
            engine = create_engine(
                url, pool_size=pool_size, max_overflow=pool_size, echo=echo, connect_args=connect_args
            )
            return engine
        if backend == "mssql":
            return _mssql_engine(parsed, pool_size=pool_size, echo=echo)
    except NoSuchModuleError as exc:
        raise ConfigurationError(f"no driver for {url!r}: {exc}") from None
    except ModuleNotFoundError as exc:
        extra = {"postgresql": "postgres", "mssql": "mssql"}.get(backend, backend)
        raise ConfigurationError(
            f"the driver for {backend} is not installed ({exc.name}); pip install 'chokaq[{extra}]'"
        ) from None
    raise ConfigurationError(f"unsupported database {backend!r}: use sqlite, postgresql+psycopg or mssql+pyodbc")


def postgresql_connect_args(query: Any, connect_timeout: float, statement_timeout: float) -> dict[str, Any]:
    """libpq parameters that end a hung connection within seconds instead of hours: a connect
    timeout, TCP keepalives and a user timeout (unacknowledged data), and a server-side statement
    timeout. The timeout goes in the start-up packet (``options``), so it costs no round trip.
    Parameters given in the URL win."""
    args: dict[str, Any] = {
        "connect_timeout": max(1, round(connect_timeout)),
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": 15_000,
    }
    args = {k: v for k, v in args.items() if k not in query}
    if statement_timeout > 0:
        option = f"-c statement_timeout={round(statement_timeout * 1000)}"
        args["options"] = f"{query['options']} {option}" if "options" in query else option
    return args


def _sqlite_engine(url: str, *, echo: bool) -> Engine:
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


def _mssql_engine(parsed: Any, *, pool_size: int, echo: bool) -> Engine:
    query = dict(parsed.query)
    auth = str(query.get("authentication", "")).lower()
    use_token = auth in {"azure_identity", "activedirectorytoken"}
    if use_token:
        # Sign in with a token from azure-identity (managed identity in Azure, developer
        # credentials locally). The ODBC driver's own ActiveDirectoryMsi mode also works and
        # needs no code here; this path covers hosts where that mode is unavailable.
        query.pop("authentication")
        parsed = parsed.set(query=query)
    engine = create_engine(
        parsed,
        pool_size=pool_size,
        max_overflow=pool_size,
        # No pre-ping: it costs a round trip per transaction. A dropped connection surfaces as
        # an invalidated-connection error, which Storage replays like any transient error.
        pool_recycle=1800,
        fast_executemany=True,
        echo=echo,
    )
    if use_token:
        from azure.identity import DefaultAzureCredential  # lazy: optional dependency

        credential = DefaultAzureCredential()

        @event.listens_for(engine, "do_connect")
        def _provide_token(dialect: Any, conn_rec: Any, cargs: Any, cparams: Any) -> None:
            raw = credential.get_token(AZURE_SQL_SCOPE).token.encode("utf-16-le")
            cparams["attrs_before"] = {SQL_COPT_SS_ACCESS_TOKEN: struct.pack(f"<I{len(raw)}s", len(raw), raw)}

    return engine


def is_transient(exc: BaseException) -> bool:
    """True when replaying the whole transaction may succeed."""
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        exc = exc.orig if exc.orig is not None else exc
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate.startswith(PG_TRANSIENT_SQLSTATE_PREFIXES):
        return True
    name = type(exc).__name__
    text = " ".join(str(a) for a in getattr(exc, "args", ()))
    if name == "OperationalError" and ("database is locked" in text or "database is busy" in text):
        return True
    if type(exc).__module__.startswith("psycopg") and any(t in text.lower() for t in PG_TRANSIENT_CONNECTION_TEXT):
        return True
    if type(exc).__module__.startswith("pyodbc") or name in {"OperationalError", "ProgrammingError", "Error"}:
        args = getattr(exc, "args", ())
        if args and isinstance(args[0], str) and args[0] in MSSQL_TRANSIENT_SQLSTATES:
            return True
        for match in _NATIVE_NUMBER.finditer(text):
            if int(match.group(1)) in MSSQL_TRANSIENT and type(exc).__module__.startswith("pyodbc"):
                return True
    return False
