"""Engines per database, and which database errors are worth replaying a transaction for."""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.pool import NullPool

from chokaq.domain.errors import ConfigurationError
from chokaq.redact import redact
from chokaq.storage.schema import SCHEMA

# SQL Server / Azure SQL error numbers worth replaying: deadlock victim (1205), lock resources
# (1204) and lock timeout (1222, from Storage.CommandTimeout), database not reachable or in
# failover (4060, 4221, 40143, 40197, 40540, 40613, 42108, 42109, 49918-49920), throttling
# (10928, 10929, 40501), dropped links (233, 10053, 10054, 10060) and the driver's timeout (-2).
MSSQL_TRANSIENT = {
    -2, 233, 1204, 1205, 1222, 4060, 4221, 10053, 10054, 10060, 10928, 10929,
    40143, 40197, 40501, 40540, 40613, 42108, 42109, 49918, 49919, 49920,
}  # fmt: skip
MSSQL_TRANSIENT_SQLSTATES = {"HYT00", "HYT01", "08S01", "08001", "40001"}
PG_TRANSIENT_SQLSTATE_PREFIXES = ("40001", "40P01", "08", "57P01", "57P02", "57P03", "53300", "57014")
# libpq's own words for a connection that failed or broke (no SQLSTATE: the server never answered).
PG_TRANSIENT_CONNECTION_TEXT = (
    "connection refused",
    "timeout expired",
    "server closed the connection",
    "connection reset",
    "connection timed out",
    "no route to host",
    "network is unreachable",
    "the database system is",
)
# pyodbc formats a diagnostic record as "[SQLSTATE] <text> (<native number>) (<ODBC function>)"
# (later records, on Windows: "; [SQLSTATE] <text> (<number>)"). The number the driver placed is
# the one just before the function name; any "(digits)" inside <text> (a duplicate key value, an
# object name) is the server's prose and must not be read as an error number.
_PYODBC_NATIVE = re.compile(r" \((-?\d+)\) \((SQL\w+)\)")
_PYODBC_NATIVE_AT_END = re.compile(r"\((-?\d+)\)\s*\Z")
_MISSING_DRIVER = re.compile(r"Can't open lib '([^']*)'")

# Connection-string keys that sign in by other means; the driver refuses them beside a token.
_SIGN_IN_KEYS = {"trusted_connection", "uid", "pwd", "authentication"}

# Token-based sign-in for pyodbc (msodbcsql's SQL_COPT_SS_ACCESS_TOKEN).
SQL_COPT_SS_ACCESS_TOKEN = 1256
AZURE_SQL_SCOPE = "https://database.windows.net/.default"


def build_engine(
    url: str,
    *,
    pool_size: int = 10,
    echo: bool = False,
    command_timeout: int = 0,
    connect_timeout: float = 10.0,
    statement_timeout: float = 0.0,
) -> Engine:
    """Create the engine for ``url`` with what each database needs to behave as a queue."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigurationError(redact(f"storage URL {url!r} is not a valid database URL: {exc}")) from None
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
            return _mssql_engine(parsed, pool_size=pool_size, echo=echo, command_timeout=command_timeout)
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


def _mssql_engine(parsed: Any, *, pool_size: int, echo: bool, command_timeout: int = 0) -> Engine:
    query = dict(parsed.query)
    auth = str(query.get("authentication", "")).lower()
    use_token = auth in {"azure_identity", "activedirectorytoken"}
    if use_token:
        # Sign in with a token from azure-identity (managed identity in Azure, developer
        # credentials locally). The ODBC driver's own ActiveDirectoryMsi mode also works and
        # needs no code here; this path covers hosts where that mode is unavailable.
        query.pop("authentication")
        parsed = parsed.set(query=query)
    connect_args: dict[str, Any] = {}
    if command_timeout > 0:
        # pyodbc's connect(timeout=) is the login timeout: a black-holed server fails the
        # connect in seconds instead of the TCP default of minutes.
        connect_args["timeout"] = command_timeout
    engine = create_engine(
        parsed,
        pool_size=pool_size,
        max_overflow=pool_size,
        # No pre-ping: it costs a round trip per transaction. A dropped connection surfaces as
        # an invalidated-connection error, which Storage replays like any transient error.
        pool_recycle=1800,
        fast_executemany=True,
        connect_args=connect_args,
        echo=echo,
    )
    if command_timeout > 0:

        @event.listens_for(engine, "connect")
        def _set_timeouts(dbapi_conn: Any, _record: Any) -> None:
            # Once per new connection, not per checkout: a SET per transaction would cost a
            # round trip on every claim and heartbeat. The query timeout (SQL_ATTR_QUERY_TIMEOUT)
            # is client side and ends any statement, blocked or not (HYT00, replayed); the lock
            # timeout makes a lock wait end first with the server's own error 1222 (replayed).
            dbapi_conn.timeout = command_timeout
            cur = dbapi_conn.cursor()
            cur.execute(f"SET LOCK_TIMEOUT {int(command_timeout) * 1000}")
            cur.close()

    @event.listens_for(engine, "handle_error")
    def _name_missing_driver(ctx: Any) -> Exception | None:
        # unixODBC reports a missing driver as 01000/IM002, which SQLAlchemy takes for a dropped
        # connection: without this every call would be replayed before failing.
        message = missing_odbc_driver(ctx.original_exception)
        return ConfigurationError(message) if message else None

    if use_token:
        from azure.identity import DefaultAzureCredential  # lazy: optional dependency

        credential = DefaultAzureCredential()

        @event.listens_for(engine, "do_connect")
        def _provide_token(dialect: Any, conn_rec: Any, cargs: Any, cparams: Any) -> None:
            raw = credential.get_token(AZURE_SQL_SCOPE).token.encode("utf-16-le")
            cparams["attrs_before"] = {SQL_COPT_SS_ACCESS_TOKEN: struct.pack(f"<I{len(raw)}s", len(raw), raw)}
            # SQLAlchemy writes Trusted_Connection=Yes when the URL has no user (and UID/PWD when it
            # has one); the driver refuses any of them beside an access token.
            cargs[0] = without_sign_in_keys(cargs[0])

    return engine


@contextmanager
def mssql_without_timeouts(conn: Connection) -> Iterator[None]:
    """Lift Storage.CommandTimeout for one connection while it runs a schema upgrade: converting a
    large table or waiting for another process's migration lock may rightly take minutes, and a
    timeout there would only replay the whole migration. The connection's own values come back
    afterwards; if that fails the connection is discarded instead of returning to the pool."""
    dbapi_conn = conn.connection.dbapi_connection
    saved = getattr(dbapi_conn, "timeout", 0)
    if not saved:
        yield
        return
    dbapi_conn.timeout = 0  # type: ignore[union-attr]
    conn.exec_driver_sql("SET LOCK_TIMEOUT -1")
    try:
        yield
    finally:
        try:
            dbapi_conn.timeout = saved  # type: ignore[union-attr]
            conn.exec_driver_sql(f"SET LOCK_TIMEOUT {int(saved) * 1000}")
        except Exception:  # the upgrade's own error is the one to report
            conn.invalidate()


def odbc_pairs(connection_string: str) -> list[tuple[str, str]]:
    """Split an ODBC connection string into (key, value); braced values keep their braces."""
    pairs: list[tuple[str, str]] = []
    i, n = 0, len(connection_string)
    while i < n:
        eq = connection_string.find("=", i)
        if eq < 0:
            break
        key = connection_string[i:eq].strip()
        j = eq + 1
        if connection_string.startswith("{", j):
            # "}}" is an escaped brace inside a braced value.
            k = j + 1
            while k < n:
                if connection_string[k] == "}":
                    if connection_string.startswith("}}", k):
                        k += 2
                        continue
                    break
                k += 1
            value = connection_string[j : k + 1]
            end = connection_string.find(";", k + 1)
        else:
            end = connection_string.find(";", j)
            value = connection_string[j : end if end >= 0 else n]
        if key:
            pairs.append((key, value))
        i = n if end < 0 else end + 1
    return pairs


def without_sign_in_keys(connection_string: str) -> str:
    """The connection string without Trusted_Connection, UID, PWD and Authentication."""
    kept = [(k, v) for k, v in odbc_pairs(connection_string) if k.lower() not in _SIGN_IN_KEYS]
    return ";".join(f"{k}={v}" for k, v in kept)


def _pyodbc_args(exc: BaseException) -> tuple[str, str] | None:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    if not type(exc).__module__.startswith("pyodbc") or len(args) < 2:
        return None
    if not isinstance(args[0], str) or not isinstance(args[1], str):
        return None
    return args[0], args[1]


def mssql_native_error(exc: BaseException) -> int | None:
    """The native error number pyodbc placed in its message, or None."""
    parsed = _pyodbc_args(exc)
    if parsed is None:
        return None
    message = parsed[1]
    # The last "(n) (SQLFunction)" is the first record's own: <text> comes before it, and later
    # records carry no function name.
    placed = list(_PYODBC_NATIVE.finditer(message))
    if placed:
        return int(placed[-1].group(1))
    at_end = _PYODBC_NATIVE_AT_END.search(message)
    return int(at_end.group(1)) if at_end else None


def missing_odbc_driver(exc: BaseException) -> str | None:
    """A one-line explanation when pyodbc could not load the ODBC driver, naming what to install."""
    parsed = _pyodbc_args(exc)
    if parsed is None:
        return None
    sqlstate, message = parsed
    lib = _MISSING_DRIVER.search(message)
    if lib is None and not (sqlstate == "IM002" or "Data source name not found" in message):
        return None
    what = f"the ODBC driver {lib.group(1)!r} cannot be loaded" if lib else "no ODBC driver is named or installed"
    return (
        f"{what}: install Microsoft's ODBC Driver 18 (Debian/Ubuntu package msodbcsql18, "
        "driver=ODBC+Driver+18+for+SQL+Server) or FreeTDS (package tdsodbc, driver=FreeTDS) "
        "and name it in the storage URL's driver= option"
    )


def is_transient(exc: BaseException) -> bool:
    """True when replaying the whole transaction may succeed."""
    invalidated = False
    if isinstance(exc, DBAPIError):
        invalidated = exc.connection_invalidated
        exc = exc.orig if exc.orig is not None else exc
    if missing_odbc_driver(exc) is not None:
        # SQLAlchemy takes unixODBC's 01000 for a dropped link; replaying cannot install a driver.
        return False
    if invalidated:
        return True
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
        number = mssql_native_error(exc)
        if number is not None and number in MSSQL_TRANSIENT:
            return True
    return False
