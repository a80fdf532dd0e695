"""NULL written into the statement text, never bound as a parameter.

pyodbc asks SQL Server to describe a parameter whose value is None (``SQLDescribeParam``, i.e.
``sp_describe_undeclared_parameters``) before the types given to ``setinputsizes`` apply: one more
round trip per statement, and VARCHAR(255) when the description fails. ``NULL`` in the text costs
nothing, and the statement cache tells the two shapes apart (``null()`` is part of its key).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import null


def inline_nulls(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` for ``insert(...).values()`` / ``update(...).values()``, None as ``NULL``."""
    return {k: null() if v is None else v for k, v in values.items()}


def by_nulls(rows: Sequence[Mapping[str, Any]]) -> list[tuple[tuple[str, ...], list[dict[str, Any]]]]:
    """Rows of an executemany grouped by which of their values are None, those left out of the
    rows: the group's statement writes them as NULL (``values(**{name: null()})``). The groups
    come in the order their first row does."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        nulls = tuple(sorted(k for k, v in row.items() if v is None))
        groups.setdefault(nulls, []).append({k: v for k, v in row.items() if v is not None})
    return list(groups.items())
