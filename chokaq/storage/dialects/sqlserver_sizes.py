"""Text parameters declared with their column's length, so SQL Server caches one plan per statement.

Given ``(SQL_WVARCHAR, None, None)`` pyodbc declares each string as ``nvarchar(len(value))``: every
distinct combination of lengths (queue, type, tags, key, creator; the names of a multi-queue claim;
an admin filter) then compiles and caches a plan of its own (pyodbc issue #213). Each text
parameter is declared here as its column is: ``NVARCHAR(n)`` as ``(SQL_WVARCHAR, n, 0)``, a
column without a length, or over 4,000 characters (8,000 for VARCHAR), as ``(type, 0, 0)``, which
msodbcsql sends as ``nvarchar(max)``. A value longer than its column (a LIKE pattern is two
wildcards and its escapes longer) is declared ``max`` instead of being cut short by the driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Dialect

SQL_VARCHAR, SQL_WVARCHAR = 12, -9
# The longest a declared (not max) parameter may be, per ODBC type.
_MAX_DECLARED = {SQL_VARCHAR: 8000, SQL_WVARCHAR: 4000}


def declared_length(type_: Any, dbtype: int) -> int:
    """The length ``type_`` (a column's type, or a variant of it for mssql) declares; 0 is max."""
    impl = getattr(type_, "_variant_mapping", {}).get("mssql", type_)
    length = getattr(impl, "length", None)
    if not isinstance(length, int) or not 0 < length <= _MAX_DECLARED[dbtype]:
        return 0
    return length


def input_size(dbtype: Any, type_: Any, values: Sequence[Any] = ()) -> tuple[Any, Any, Any]:
    """pyodbc's ``setinputsizes`` entry for one parameter; ``values``: what it carries, if known."""
    if isinstance(dbtype, tuple):
        return dbtype  # already sized (NVARCHAR(max) payloads: (SQL_WVARCHAR, 0, 0))
    if dbtype not in _MAX_DECLARED:
        return (dbtype, None, None)
    length = declared_length(type_, dbtype)
    if length and any(isinstance(v, str) and len(v) > length for v in values):
        length = 0
    return (dbtype, length, 0)


def declare_text_lengths(dialect: Dialect) -> None:
    """Size every statement's text parameters this way (SQLAlchemy's own execution path; the hot
    path's executor asks :func:`input_size` itself)."""
    send = dialect.do_set_input_sizes

    def do_set_input_sizes(cursor: Any, list_of_tuples: list[tuple[str, Any, Any]], context: Any) -> None:
        sets = [p for p in (context.parameters or []) if isinstance(p, (list, tuple)) and len(p) == len(list_of_tuples)]
        sized = [
            (key, input_size(dbtype, type_, [p[i] for p in sets]), type_)
            for i, (key, dbtype, type_) in enumerate(list_of_tuples)
        ]
        send(cursor, sized, context)

    dialect.do_set_input_sizes = do_set_input_sizes  # type: ignore[method-assign]
