"""Dialect-specific SQL fragments. Everything else in the storage package is dialect-neutral."""

from __future__ import annotations

from typing import Any

from sqlalchemy import DateTime, Select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.sql.selectable import FromClause

# Claim rows without waiting on, or deadlocking with, other workers' claims.
MSSQL_CLAIM_HINT = "WITH (UPDLOCK, READPAST, ROWLOCK)"
# Serialise MaxWorkers accounting per queue: a plain update lock on the queue row.
MSSQL_QUEUE_LOCK_HINT = "WITH (UPDLOCK, ROWLOCK)"

SQLITE_TS_FORMAT = "%Y-%m-%d %H:%M:%f"


class utcnow(FunctionElement[Any]):
    """The database's UTC clock. Workers, sweeps and admins on many hosts share one clock."""

    type = DateTime()
    inherit_cache = True


@compiles(utcnow)
def _utcnow_default(element: utcnow, compiler: Any, **kw: Any) -> str:
    return "CURRENT_TIMESTAMP"


@compiles(utcnow, "mssql")
def _utcnow_mssql(element: utcnow, compiler: Any, **kw: Any) -> str:
    return "SYSUTCDATETIME()"


@compiles(utcnow, "postgresql")
def _utcnow_pg(element: utcnow, compiler: Any, **kw: Any) -> str:
    # clock_timestamp, not now(): a long transaction must not stamp stale times.
    return "(clock_timestamp() AT TIME ZONE 'UTC')"


@compiles(utcnow, "sqlite")
def _utcnow_sqlite(element: utcnow, compiler: Any, **kw: Any) -> str:
    return f"strftime('{SQLITE_TS_FORMAT}', 'now')"


class utc_offset(FunctionElement[Any]):
    """``utcnow() + seconds`` where ``seconds`` may be a column expression (per-queue timeouts)."""

    type = DateTime()
    inherit_cache = True

    def __init__(self, seconds: ColumnElement[Any]) -> None:
        super().__init__(seconds)


def _arg(element: utc_offset, compiler: Any, **kw: Any) -> str:
    (seconds,) = list(element.clauses)
    return str(compiler.process(seconds, **kw))


@compiles(utc_offset, "mssql")
def _offset_mssql(element: utc_offset, compiler: Any, **kw: Any) -> str:
    # DATEADD takes an int: whole seconds (a year of delay fits) plus the millisecond remainder.
    x = _arg(element, compiler, **kw)
    return (
        f"DATEADD(SECOND, CAST(FLOOR({x}) AS INT), "
        f"DATEADD(MILLISECOND, CAST((({x}) - FLOOR({x})) * 1000 AS INT), SYSUTCDATETIME()))"
    )


@compiles(utc_offset, "postgresql")
def _offset_pg(element: utc_offset, compiler: Any, **kw: Any) -> str:
    return (
        "((clock_timestamp() AT TIME ZONE 'UTC') + "
        f"make_interval(secs => CAST(({_arg(element, compiler, **kw)}) AS DOUBLE PRECISION)))"
    )


@compiles(utc_offset, "sqlite")
def _offset_sqlite(element: utc_offset, compiler: Any, **kw: Any) -> str:
    return f"strftime('{SQLITE_TS_FORMAT}', 'now', ({_arg(element, compiler, **kw)}) || ' seconds')"


@compiles(utc_offset)
def _offset_default(element: utc_offset, compiler: Any, **kw: Any) -> str:
    raise NotImplementedError(f"utc_offset is not implemented for {compiler.dialect.name}")


def claim_lock(stmt: Select[Any], table: FromClause) -> Select[Any]:
    """Make a candidate SELECT skip rows other workers hold, on every dialect.

    SQLAlchemy drops ``with_for_update`` on SQL Server, so the table hint is added separately.
    SQLite has neither: its write transactions are serialised (BEGIN IMMEDIATE).
    """
    return stmt.with_for_update(skip_locked=True, of=table).with_hint(table, MSSQL_CLAIM_HINT, "mssql")


def row_lock(stmt: Select[Any], table: FromClause) -> Select[Any]:
    """Lock the selected rows until commit, waiting for other holders."""
    return stmt.with_for_update(of=table).with_hint(table, MSSQL_QUEUE_LOCK_HINT, "mssql")
