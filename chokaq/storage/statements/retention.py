"""Retention: the oldest rows of a finished-jobs table (JobsArchive, JobsDLQ) deleted a bounded
batch at a time, so a purge never holds locks or log space for long."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Column, Delete, Select, Table, delete, select


def purge_older_statement(table: Table, time_column: Column[Any], older_than: datetime, size: int) -> Delete:
    """Delete the oldest ``size`` rows of ``table`` whose ``time_column`` is before ``older_than``.

    One statement with two parameters, whatever the batch size: binding the chosen ids one
    parameter each broke SQL Server's 2,100-parameter limit (error 8003). The subquery reads the
    table's index on ``time_column`` (IX_JobsArchive_FinishedAt, IX_JobsDLQ_FailedAt); the outer
    condition is repeated so a row that changed under the subquery is never taken."""
    old = time_column < older_than
    return delete(table).where(table.c.Id.in_(oldest_ids(table, time_column, older_than, size)), old)


def oldest_ids(table: Table, time_column: Any, older_than: Any, size: int) -> Select[Any]:
    """The ids of the batch: the oldest ``size`` rows before ``older_than``, ties broken by id.
    The step journals are deleted by this same choice first (statements/steps.py), in the same
    transaction: without the tie-break, rows dead-lettered together (one timestamp) could be chosen
    differently by the two statements, deleting the journal of a job that stays."""
    return select(table.c.Id).where(time_column < older_than).order_by(time_column, table.c.Id).limit(size)
