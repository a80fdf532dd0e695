"""SQL Server connections (``mssql+pyodbc``): the engine, token sign-in, the command timeout, and
the autocommit pool for single statements."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL

from chokaq.domain.errors import ConfigurationError
from chokaq.storage.dialects.sqlserver_errors import missing_odbc_driver
from chokaq.storage.dialects.sqlserver_sizes import declare_text_lengths

# Connection-string keys that sign in by other means; the driver refuses them beside a token.
_SIGN_IN_KEYS = {"trusted_connection", "uid", "pwd", "authentication"}

# Token-based sign-in for pyodbc (msodbcsql's SQL_COPT_SS_ACCESS_TOKEN).
SQL_COPT_SS_ACCESS_TOKEN = 1256
AZURE_SQL_SCOPE = "https://database.windows.net/.default"


def mssql_engine(parsed: URL, *, pool_size: int, echo: bool, command_timeout: int = 0) -> Engine:
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
    declare_text_lengths(engine.dialect)
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


def autocommit_twin(engine: Engine) -> Engine:
    """A second pool, over the same connection set-up, whose connections stay in autocommit for
    their whole life, for the single-statement hot path.

    Switching a pooled connection to AUTOCOMMIT for one statement costs a
    ``SET TRANSACTION ISOLATION LEVEL`` round trip when SQLAlchemy resets it on its way back to
    the pool. (PostgreSQL switches client-side and keeps the shared pool.)
    """
    pool = engine.pool.recreate()  # same creator and connect-time set-up, its own connections

    @event.listens_for(pool, "connect")
    def _autocommit(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.autocommit = True

    return Engine(pool, engine.dialect, engine.url, echo=engine.echo)


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
