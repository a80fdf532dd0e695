"""Job status as it appears in statements: the three JobsHot states and literal comparisons."""

from __future__ import annotations

from typing import Any

from sqlalchemy import literal_column
from sqlalchemy.sql.elements import ColumnElement

from chokaq.domain.states import JobStatus

PENDING, FETCHED, PROCESSING = int(JobStatus.PENDING), int(JobStatus.FETCHED), int(JobStatus.PROCESSING)


def status_is(column: ColumnElement[Any], status: int) -> ColumnElement[bool]:
    """Compare Status with a literal, never a bind parameter.

    The partial (filtered) indexes are defined with ``WHERE Status = n``. A parameterised predicate
    cannot use them: PostgreSQL's generic plans for prepared statements and SQL Server's plans for
    parameterised queries fall back to scanning and sorting every row.
    """
    return column == literal_column(str(int(status)))


def status_in(column: ColumnElement[Any], *statuses: int) -> ColumnElement[bool]:
    return column.in_([literal_column(str(int(s))) for s in statuses])
