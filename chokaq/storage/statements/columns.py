"""The column collections that statement builders read: a table's, a CTE's or a subquery's."""

from __future__ import annotations

from typing import Any, TypeAlias

from sqlalchemy.sql.base import ReadOnlyColumnCollection
from sqlalchemy.sql.elements import ColumnElement

# ``jobs_hot.c``, SQL Server's claim CTE (``table("c", ...).c``) or a moved-rows CTE's ``.c``: the
# same column names over different FROMs, so one builder renders against any of them.
Columns: TypeAlias = ReadOnlyColumnCollection[str, ColumnElement[Any]]
