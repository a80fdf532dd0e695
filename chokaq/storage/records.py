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
    "Attempts": "attempts",
    "Logs": "logs",
    "Progress": "progress",
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


# The order the fast path below unpacks; a row in any other shape takes the generic path.
HOT_ROW = (
    "Id",
    "Queue",
    "Type",
    "Payload",
    "Tags",
    "IdempotencyKey",
    "Priority",
    "Status",
    "AttemptCount",
    "WorkerId",
    "HeartbeatUtc",
    "ScheduledAtUtc",
    "CreatedAtUtc",
    "StartedAtUtc",
    "LastUpdatedUtc",
    "CreatedBy",
    "LastModifiedBy",
    "ZombieRetry",
    "Attempts",
)


# JobStatus by value: an enum call per claimed job costs more than the rest of its unpacking.
_STATUSES = {s.value: s for s in JobStatus}


def hot_record(row: Any) -> JobRecord:
    if tuple(row._fields) == HOT_ROW:
        return hot_record_from_values(row)
    return to_record(Location.HOT, row)


def hot_record_from_values(values: Any) -> JobRecord:
    """A whole JobsHot row, its values in :data:`HOT_ROW` order (every claim returns one):
    unpacked by position, which costs a worker far less per job than the generic mapping walk."""
    (
        job_id,
        queue,
        type_,
        payload,
        tags,
        idempotency_key,
        priority,
        status,
        attempt_count,
        worker_id,
        heartbeat_utc,
        scheduled_at_utc,
        created_at_utc,
        started_at_utc,
        last_updated_utc,
        created_by,
        last_modified_by,
        zombie_retry,
        attempts,
    ) = values
    return JobRecord(
        id=job_id,
        location=Location.HOT,
        queue=queue,
        type=type_,
        payload=payload,
        tags=tags,
        attempt_count=attempt_count,
        worker_id=worker_id,
        created_by=created_by,
        last_modified_by=last_modified_by,
        created_at_utc=created_at_utc,
        status=_STATUSES[status] if status in _STATUSES else JobStatus(status),
        priority=priority,
        idempotency_key=idempotency_key,
        heartbeat_utc=heartbeat_utc,
        scheduled_at_utc=scheduled_at_utc,
        started_at_utc=started_at_utc,
        last_updated_utc=last_updated_utc,
        zombie_retry=bool(zombie_retry),
        attempts=attempts,
    )


def archive_record(row: Any) -> JobRecord:
    return to_record(Location.ARCHIVE, row)


def dlq_record(row: Any) -> JobRecord:
    return to_record(Location.DLQ, row)
