"""Canned rows for the recording driver, shaped like chokaq's tables."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Column, Table

from chokaq.storage.schema import hot_record_columns, jobs_archive, jobs_dlq, jobs_hot

T0 = datetime(2026, 1, 1, 12, 0, 0)

_DEFAULTS: dict[str, Any] = {
    "Queue": "default",
    "Type": "t",
    "Payload": "{}",
    "Priority": 10,
    "Status": 1,
    "AttemptCount": 0,
    "WorkerId": "w",
    "ScheduledAtUtc": T0,
    "CreatedAtUtc": T0,
    "LastUpdatedUtc": T0,
    "FinishedAtUtc": T0,
    "FailedAtUtc": T0,
    "FailureReason": 1,
    "ZombieRetry": False,
}


def columns(table: Table | tuple[Column[Any], ...]) -> list[str]:
    return [c.name for c in (table.c if isinstance(table, Table) else table)]


def row(table: Table | tuple[Column[Any], ...], job_id: str, **values: Any) -> tuple[Any, ...]:
    merged = {**_DEFAULTS, "Id": job_id, **values}
    return tuple(merged.get(name) for name in columns(table))


HOT, ARCHIVE, DLQ = jobs_hot, jobs_archive, jobs_dlq
# What claims and the worker's own reads return: a JobsHot row without its logs and progress.
HOT_RECORD = hot_record_columns
