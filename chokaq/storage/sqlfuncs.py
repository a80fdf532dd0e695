"""Dialect-specific SQL fragments. Everything else in the storage package is dialect-neutral."""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

from sqlalchemy import BigInteger, Boolean, DateTime, Float, Integer, Select, UnicodeText, bindparam, cast
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter, ColumnElement
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.sql.selectable import FromClause
from sqlalchemy.types import TypeDecorator, TypeEngine

from chokaq.storage.dialects import PROFILES

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
def _utcnow_default(element: utcnow, compiler: SQLCompiler, **kw: Any) -> str:
    return "CURRENT_TIMESTAMP"


@compiles(utcnow, "mssql")
def _utcnow_mssql(element: utcnow, compiler: SQLCompiler, **kw: Any) -> str:
    return "SYSUTCDATETIME()"


@compiles(utcnow, "postgresql")
def _utcnow_pg(element: utcnow, compiler: SQLCompiler, **kw: Any) -> str:
    # clock_timestamp, not now(): a long transaction must not stamp stale times.
    return "(clock_timestamp() AT TIME ZONE 'UTC')"


@compiles(utcnow, "sqlite")
def _utcnow_sqlite(element: utcnow, compiler: SQLCompiler, **kw: Any) -> str:
    return f"strftime('{SQLITE_TS_FORMAT}', 'now')"


def seconds(value: float | None = None, *, name: str | None = None) -> ColumnElement[Any]:
    """A number of seconds bound from Python, as ``CAST(? AS FLOAT)``.

    The cast gives the parameter a declared type wherever it lands (arithmetic, FLOOR, COALESCE).
    SQL Server cannot describe a bare ``?`` in an expression of untyped operands: with
    fast_executemany pyodbc then falls back to VARCHAR(255) for every parameter of the statement.
    ``name``: a named parameter for executemany rows (``value`` then comes per row).
    """
    if name is not None:
        return cast(bindparam(name, type_=Float()), Float())
    return cast(bindparam(None, float(value or 0.0), type_=Float()), Float())


class utc_offset(FunctionElement[Any]):
    """``utcnow() + seconds`` where ``seconds`` may be a column expression (per-queue timeouts).

    Python numbers go in through :func:`seconds`, never as a bare bind parameter.
    """

    type = DateTime()
    inherit_cache = True

    def __init__(self, seconds: ColumnElement[Any]) -> None:
        super().__init__(seconds)


def _arg(element: utc_offset, compiler: SQLCompiler, **kw: Any) -> str:
    (seconds,) = list(element.clauses)
    return str(compiler.process(seconds, **kw))


@compiles(utc_offset, "mssql")
def _offset_mssql(element: utc_offset, compiler: SQLCompiler, **kw: Any) -> str:
    # DATEADD takes an int: whole seconds (a year of delay fits) plus the millisecond remainder.
    x = _arg(element, compiler, **kw)
    return (
        f"DATEADD(SECOND, CAST(FLOOR({x}) AS INT), "
        f"DATEADD(MILLISECOND, CAST((({x}) - FLOOR({x})) * 1000 AS INT), SYSUTCDATETIME()))"
    )


@compiles(utc_offset, "postgresql")
def _offset_pg(element: utc_offset, compiler: SQLCompiler, **kw: Any) -> str:
    return (
        "((clock_timestamp() AT TIME ZONE 'UTC') + "
        f"make_interval(secs => CAST(({_arg(element, compiler, **kw)}) AS DOUBLE PRECISION)))"
    )


@compiles(utc_offset, "sqlite")
def _offset_sqlite(element: utc_offset, compiler: SQLCompiler, **kw: Any) -> str:
    return f"strftime('{SQLITE_TS_FORMAT}', 'now', ({_arg(element, compiler, **kw)}) || ' seconds')"


@compiles(utc_offset)
def _offset_default(element: utc_offset, compiler: SQLCompiler, **kw: Any) -> NoReturn:
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


# ---------------------------------------------------------------------------- list parameters
# The worker's moves name up to a few hundred jobs. As an expanded ``IN (:p1, :p2, ...)`` every
# batch size is a different statement: the drivers cannot cache or prepare it, and the database
# plans it again each time. One parameter holding the whole list keeps the statement text fixed.


def _arrays(dialect: Dialect) -> bool:
    """Whether ``dialect`` binds a list as a native array (a JSON text where chokaq has no profile
    for it, as when a statement is printed with SQLAlchemy's default dialect)."""
    profile = PROFILES.get(dialect.name)
    return profile is not None and profile.list_arrays


class ListParam(TypeDecorator[list[Any]]):
    """A list bound as one parameter: an array on PostgreSQL, a JSON array elsewhere."""

    impl = UnicodeText
    cache_ok = True

    def __init__(self, item_type: TypeEngine[Any]) -> None:
        super().__init__()
        self.item_type = item_type

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if _arrays(dialect):
            return dialect.type_descriptor(postgresql.ARRAY(self.item_type))
        return dialect.type_descriptor(UnicodeText())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        items = list(value)
        return items if _arrays(dialect) else json.dumps(items)


class in_list(FunctionElement[bool]):
    """``column IN (the items of one list parameter)``."""

    type = Boolean()
    inherit_cache = True
    # A predicate, not a boolean value: SQL Server must not get "... = 1" appended.
    _is_implicitly_boolean = True

    def __init__(self, column: ColumnElement[Any], items: BindParameter[Any]) -> None:
        """``items``: a bind parameter of type :class:`ListParam`."""
        super().__init__(column, items)


def _pair(element: FunctionElement[Any], compiler: Any, **kw: Any) -> tuple[str, str, Any]:
    column, param = list(element.clauses)
    return compiler.process(column, **kw), compiler.process(param, **kw), column


@compiles(in_list, "postgresql")
def _in_list_pg(element: in_list, compiler: SQLCompiler, **kw: Any) -> str:
    col, param, _ = _pair(element, compiler, **kw)
    return f"{col} = ANY({param})"


def mssql_type_and_collation(dialect: Dialect, type_: TypeEngine[Any]) -> tuple[str, str]:
    """``("VARCHAR(50)", " COLLATE Latin1_General_100_BIN2")``: a column type as SQL Server declares
    it, split from its collation clause ("" when it has none).

    chokaq's key types render their collation only in a column definition (``type_expression`` a
    Column), so one is made up here. A CAST takes no COLLATE, but its result and OPENJSON's columns
    are implicit collation labels of the database default: compared with a BIN2 key column, two
    implicit labels that differ are Msg 468. An explicit ``COLLATE`` after the CAST settles it.
    """
    from sqlalchemy import Column  # the schema module's Column; local to keep this module light

    full = str(dialect.type_compiler_instance.process(type_, type_expression=Column("x", type_)))
    match = re.search(r"\s+COLLATE\s+\S+", full)
    return (full[: match.start()] + full[match.end() :], match.group(0)) if match else (full, "")


@compiles(in_list, "mssql")
def _in_list_mssql(element: in_list, compiler: SQLCompiler, **kw: Any) -> str:
    col, param, column = _pair(element, compiler, **kw)
    # OPENJSON yields NVARCHAR(MAX); cast to the column's own type or the seek becomes a scan, and
    # to its collation, or a BIN2 key column cannot be compared with it (see above).
    sqltype, collate = mssql_type_and_collation(compiler.dialect, column.type)
    # The parameter is cast too: OPENJSON(?) alone leaves its type for the server to guess.
    return f"{col} IN (SELECT CAST([value] AS {sqltype}){collate} FROM OPENJSON(CAST({param} AS NVARCHAR(max))))"


@compiles(in_list, "sqlite")
def _in_list_sqlite(element: in_list, compiler: SQLCompiler, **kw: Any) -> str:
    col, param, _ = _pair(element, compiler, **kw)
    return f"{col} IN (SELECT value FROM json_each({param}))"


@compiles(in_list)
def _in_list_default(element: in_list, compiler: SQLCompiler, **kw: Any) -> NoReturn:
    raise NotImplementedError(f"in_list is not implemented for {compiler.dialect.name}")


class lookup_int(FunctionElement[int]):
    """The integer that a ``{key: int}`` mapping, bound as one JSON text parameter, holds for
    ``key`` (a string column). NULL when the key is missing."""

    type = BigInteger()
    inherit_cache = True

    def __init__(self, key: ColumnElement[Any], mapping: BindParameter[Any]) -> None:
        """``mapping``: a bind parameter holding the mapping as JSON text."""
        super().__init__(key, mapping)


@compiles(lookup_int, "postgresql")
def _lookup_pg(element: lookup_int, compiler: SQLCompiler, **kw: Any) -> str:
    key, param, _ = _pair(element, compiler, **kw)
    # A scalar subquery is evaluated once per statement (an InitPlan); a bare cast of the
    # parameter is parsed again for every row once the statement runs from a generic plan.
    return f"CAST(((SELECT CAST({param} AS JSONB)) ->> {key}) AS BIGINT)"


@compiles(lookup_int, "mssql")
def _lookup_mssql(element: lookup_int, compiler: SQLCompiler, **kw: Any) -> str:
    key, param, _ = _pair(element, compiler, **kw)
    return f"CAST(JSON_VALUE(CAST({param} AS NVARCHAR(max)), CONCAT('$.\"', {key}, '\"')) AS BIGINT)"


@compiles(lookup_int, "sqlite")
def _lookup_sqlite(element: lookup_int, compiler: SQLCompiler, **kw: Any) -> str:
    key, param, _ = _pair(element, compiler, **kw)
    return f"CAST(json_extract({param}, '$.\"' || {key} || '\"') AS INTEGER)"


@compiles(lookup_int)
def _lookup_default(element: lookup_int, compiler: SQLCompiler, **kw: Any) -> NoReturn:
    raise NotImplementedError(f"lookup_int is not implemented for {compiler.dialect.name}")


class lookup_text(FunctionElement[str]):
    """The text that a ``{key: text}`` mapping, bound as one JSON text parameter, holds for ``key``
    (a string column), of any length. NULL when the key is missing."""

    type = UnicodeText()
    inherit_cache = True

    def __init__(self, key: ColumnElement[Any], mapping: BindParameter[Any]) -> None:
        super().__init__(key, mapping)


@compiles(lookup_text, "postgresql")
def _lookup_text_pg(element: lookup_text, compiler: SQLCompiler, **kw: Any) -> str:
    key, param, _ = _pair(element, compiler, **kw)
    return f"((SELECT CAST({param} AS JSONB)) ->> {key})"  # parsed once per statement, as for lookup_int


@compiles(lookup_text, "mssql")
def _lookup_text_mssql(element: lookup_text, compiler: SQLCompiler, **kw: Any) -> str:
    key, param, column = _pair(element, compiler, **kw)
    # Not JSON_VALUE: it answers NULL for a value over 4,000 characters. OPENJSON's [value] is
    # NVARCHAR(max); its [key] takes the key column's collation (see mssql_type_and_collation).
    _, collate = mssql_type_and_collation(compiler.dialect, column.type)
    return f"(SELECT [value] FROM OPENJSON(CAST({param} AS NVARCHAR(max))) WHERE [key]{collate} = {key})"


@compiles(lookup_text, "sqlite")
def _lookup_text_sqlite(element: lookup_text, compiler: SQLCompiler, **kw: Any) -> str:
    key, param, _ = _pair(element, compiler, **kw)
    return f"json_extract({param}, '$.\"' || {key} || '\"')"


@compiles(lookup_text)
def _lookup_text_default(element: lookup_text, compiler: SQLCompiler, **kw: Any) -> NoReturn:
    raise NotImplementedError(f"lookup_text is not implemented for {compiler.dialect.name}")


# ---------------------------------------------------------------------------- time arithmetic
# The history charts group rows by time bucket in the database. Each dialect spells "how long
# from A to B" differently; these two constructs keep history.py dialect-neutral.


class whole_seconds_since(FunctionElement[int]):
    """Whole seconds from ``start`` (a bound UTC datetime on a whole second) to ``column``,
    counted exactly (integer arithmetic, no floating day fractions), for rows at or after
    ``start``: bucket numbers come from integer division of this."""

    type = BigInteger()
    inherit_cache = True

    def __init__(self, column: ColumnElement[Any], start: ColumnElement[Any]) -> None:
        super().__init__(column, start)


@compiles(whole_seconds_since, "postgresql")
def _since_pg(element: whole_seconds_since, compiler: SQLCompiler, **kw: Any) -> str:
    col, start, _ = _pair(element, compiler, **kw)
    # date_part is double precision; EXTRACT is numeric since PostgreSQL 14, slow per row.
    return f"CAST(FLOOR(date_part('epoch', {col} - {start})) AS BIGINT)"


@compiles(whole_seconds_since, "mssql")
def _since_mssql(element: whole_seconds_since, compiler: SQLCompiler, **kw: Any) -> str:
    # DATEDIFF counts second boundaries crossed: from a whole-second start that is the floor.
    # The start is cast: a bare parameter as a function's argument is one SQL Server cannot type.
    col, start, _ = _pair(element, compiler, **kw)
    return f"DATEDIFF_BIG(SECOND, CAST({start} AS DATETIME2), {col})"


@compiles(whole_seconds_since, "sqlite")
def _since_sqlite(element: whole_seconds_since, compiler: SQLCompiler, **kw: Any) -> str:
    # strftime('%s') is integer epoch seconds: exact at bucket edges, where julianday() floats
    # could put a row stamped on the edge into the bucket before.
    col, start, _ = _pair(element, compiler, **kw)
    return f"(CAST(strftime('%s', {col}) AS INTEGER) - CAST(strftime('%s', {start}) AS INTEGER))"


@compiles(whole_seconds_since)
def _since_default(element: whole_seconds_since, compiler: SQLCompiler, **kw: Any) -> NoReturn:
    raise NotImplementedError(f"whole_seconds_since is not implemented for {compiler.dialect.name}")


class typed_on_mssql(FunctionElement[Any]):
    """``CAST(x AS <its type>)`` on SQL Server, ``x`` elsewhere: for a parameter that is an operand of
    arithmetic, which SQL Server cannot type when asked to describe the statement."""

    inherit_cache = True

    def __init__(self, value: ColumnElement[Any]) -> None:
        self.type = value.type
        super().__init__(value)


@compiles(typed_on_mssql, "mssql")
def _typed_mssql(element: typed_on_mssql, compiler: SQLCompiler, **kw: Any) -> str:
    (value,) = list(element.clauses)
    return f"CAST({compiler.process(value, **kw)} AS {compiler.dialect.type_compiler_instance.process(value.type)})"


@compiles(typed_on_mssql)
def _typed_other(element: typed_on_mssql, compiler: SQLCompiler, **kw: Any) -> str:
    (value,) = list(element.clauses)
    return str(compiler.process(value, **kw))


class millis_between(FunctionElement[float]):
    """Milliseconds from column ``a`` to column ``b`` (NULL when either is NULL)."""

    type = Float()
    inherit_cache = True

    def __init__(self, a: ColumnElement[Any], b: ColumnElement[Any]) -> None:
        super().__init__(a, b)


@compiles(millis_between, "postgresql")
def _millis_pg(element: millis_between, compiler: SQLCompiler, **kw: Any) -> str:
    a, b, _ = _pair(element, compiler, **kw)
    return f"(date_part('epoch', {b} - {a}) * 1000.0)"


@compiles(millis_between, "mssql")
def _millis_mssql(element: millis_between, compiler: SQLCompiler, **kw: Any) -> str:
    a, b, _ = _pair(element, compiler, **kw)
    return f"CAST(DATEDIFF_BIG(MILLISECOND, {a}, {b}) AS FLOAT)"


@compiles(millis_between, "sqlite")
def _millis_sqlite(element: millis_between, compiler: SQLCompiler, **kw: Any) -> str:
    a, b, _ = _pair(element, compiler, **kw)
    return f"((julianday({b}) - julianday({a})) * 86400000.0)"


@compiles(millis_between)
def _millis_default(element: millis_between, compiler: SQLCompiler, **kw: Any) -> NoReturn:
    raise NotImplementedError(f"millis_between is not implemented for {compiler.dialect.name}")


WAIT_BINS_PER_DECADE = 5
WAIT_TOP_BIN = 41  # waits from 10**8 ms (about 28 h) up


class wait_bin(FunctionElement[int]):
    """The histogram bin of a wait in ms: 0 below 1 ms, then ``floor(log10(ms) * 5) + 1`` (five
    log-uniform bins per decade), capped at :data:`WAIT_TOP_BIN`. One LOG per row where the database
    has one; SQLite (no LOG unless built with math functions) compares against the same edges."""

    type = Integer()
    inherit_cache = True

    def __init__(self, ms: ColumnElement[Any]) -> None:
        super().__init__(ms)


def _ms(element: wait_bin, compiler: SQLCompiler, **kw: Any) -> str:
    (ms,) = list(element.clauses)
    return str(compiler.process(ms, **kw))


@compiles(wait_bin, "postgresql")
def _wait_bin_pg(element: wait_bin, compiler: SQLCompiler, **kw: Any) -> str:
    w = _ms(element, compiler, **kw)
    return (
        f"CASE WHEN {w} < 1 THEN 0 ELSE LEAST(CAST(FLOOR(LOG({w}) * {WAIT_BINS_PER_DECADE}) AS INTEGER) + 1, "
        f"{WAIT_TOP_BIN}) END"
    )


@compiles(wait_bin, "mssql")
def _wait_bin_mssql(element: wait_bin, compiler: SQLCompiler, **kw: Any) -> str:
    w = _ms(element, compiler, **kw)
    return (
        f"CASE WHEN {w} < 1 THEN 0 WHEN {w} >= 1e8 THEN {WAIT_TOP_BIN} "
        f"ELSE CAST(FLOOR(LOG10({w}) * {WAIT_BINS_PER_DECADE}) AS INT) + 1 END"
    )


@compiles(wait_bin, "sqlite")
def _wait_bin_sqlite(element: wait_bin, compiler: SQLCompiler, **kw: Any) -> str:
    w = _ms(element, compiler, **kw)
    edges = [10 ** (k / WAIT_BINS_PER_DECADE) for k in range(WAIT_TOP_BIN)]

    def search(lo: int, hi: int) -> str:
        # Bins lo..hi; bin i holds [edges[i-1], edges[i]). A binary search: six comparisons a row.
        if lo == hi:
            return str(lo)
        mid = (lo + hi) // 2
        return f"CASE WHEN {w} < {edges[mid]!r} THEN {search(lo, mid)} ELSE {search(mid + 1, hi)} END"

    return search(0, WAIT_TOP_BIN)


@compiles(wait_bin)
def _wait_bin_default(element: wait_bin, compiler: SQLCompiler, **kw: Any) -> NoReturn:
    raise NotImplementedError(f"wait_bin is not implemented for {compiler.dialect.name}")
