"""Mapping rows of the three job tables to :class:`JobRecord`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chokaq.domain.models import JobRecord
from chokaq.domain.states import FailureReason, JobStatus, Location

# Column name -> JobRecord field; a table supplies whichever of these it has.
FIELDS = {
    "Id": "id",
    "Queue": "queue",
    "Type": "type",
    "Payload": "payload",
    "Tags": "tags",
    "AttemptCount": "attempt_count",
    "WorkerId": "worker_id",
    "CreatedBy": "created_by",
    "LastModifiedBy": "last_modified_by",
    "CreatedAtUtc": "created_at_utc",
    "Priority": "priority",
    "IdempotencyKey": "idempotency_key",
    "HeartbeatUtc": "heartbeat_utc",
    "ScheduledAtUtc": "scheduled_at_utc",
    "StartedAtUtc": "started_at_utc",
    "LastUpdatedUtc": "last_updated_utc",
    "FinishedAtUtc": "finished_at_utc",
    "DurationMs": "duration_ms",
    "ErrorDetails": "error_details",
    "FailedAtUtc": "failed_at_utc",
}
CONVERT: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "Status": ("status", JobStatus),
    "FailureReason": ("failure_reason", FailureReason),
    "ZombieRetry": ("zombie_retry", bool),
}


def to_record(location: Location, row: Any) -> JobRecord:
    values: dict[str, Any] = {"location": location}
    for column, value in row._mapping.items():
        if column in FIELDS:
            values[FIELDS[column]] = value
        elif column in CONVERT:
            field, convert = CONVERT[column]
            values[field] = convert(value)
    return JobRecord(**values)


def hot_record(row: Any) -> JobRecord:
    return to_record(Location.HOT, row)


def archive_record(row: Any) -> JobRecord:
    return to_record(Location.ARCHIVE, row)


def dlq_record(row: Any) -> JobRecord:
    return to_record(Location.DLQ, row)
