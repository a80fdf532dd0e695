"""SQL Server's upsert: one ``MERGE ... WITH (HOLDLOCK)`` (see :meth:`Profile.upsert_statement`).

A plain MERGE is not atomic against a concurrent one for the same key: both may find no row and
both insert (a key violation). HOLDLOCK (serializable on the target) makes the first take a key
range lock the second waits on, so the second finds the row and updates it. Every value travels
once, in the ``USING`` row, typed by its bind; the update and the insert read them from there.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, NoReturn

from sqlalchemy import Table
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement, ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal


class Merge(Executable, ClauseElement):
    """``MERGE table WITH (HOLDLOCK) USING (SELECT values) ... UPDATE (all but key and keep) / INSERT``."""

    _traverse_internals = [
        ("table", InternalTraversal.dp_clauseelement),
        ("names", InternalTraversal.dp_string_list),
        ("values", InternalTraversal.dp_clauseelement_list),
        ("keep", InternalTraversal.dp_string_list),
    ]

    def __init__(self, table: Table, values: Mapping[str, ColumnElement[Any]], keep: Collection[str] = ()) -> None:
        self.table = table
        self.names = list(values)
        self.values = list(values.values())
        self.keep = sorted(keep)


@compiles(Merge, "mssql")
def _merge(element: Merge, compiler: SQLCompiler, **kw: Any) -> str:
    q = compiler.preparer.quote
    key = [c.name for c in element.table.primary_key]
    source = ", ".join(
        f"{compiler.process(v, **kw)} AS {q(n)}" for n, v in zip(element.names, element.values, strict=True)
    )
    on = " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in key)
    sets = ", ".join(f"{q(n)} = s.{q(n)}" for n in element.names if n not in key and n not in element.keep)
    cols = ", ".join(q(n) for n in element.names)
    vals = ", ".join(f"s.{q(n)}" for n in element.names)
    return (
        f"MERGE INTO {compiler.preparer.format_table(element.table)} WITH (HOLDLOCK) AS t\n"
        f"USING (SELECT {source}) AS s\nON {on}\n"
        f"WHEN MATCHED THEN UPDATE SET {sets}\n"
        f"WHEN NOT MATCHED THEN INSERT ({cols}) VALUES ({vals});"
    )


@compiles(Merge)
def _merge_other(element: Merge, compiler: SQLCompiler, **kw: Any) -> NoReturn:
    raise NotImplementedError("Merge is SQL Server's upsert")
