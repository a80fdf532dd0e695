"""Mapping rows of the three job tables to :class:`JobRecord`."""

from __future__ import annotations

from typing import Any

from chokaq.domain.models import JobRecord
from chokaq.domain.states import FailureReason, JobStatus, Location


def hot_record(row: Any) -> JobRecord:
    m = row._mapping
    return JobRecord(
        id=m["Id"],
        location=Location.HOT,
        queue=m["Queue"],
        type=m["Type"],
        payload=m["Payload"],
        tags=m["Tags"],
        attempt_count=m["AttemptCount"],
        worker_id=m["WorkerId"],
        created_by=m["CreatedBy"],
        last_modified_by=m["LastModifiedBy"],
        created_at_utc=m["CreatedAtUtc"],
        status=JobStatus(m["Status"]),
        priority=m["Priority"],
        idempotency_key=m["IdempotencyKey"],
        heartbeat_utc=m["HeartbeatUtc"],
        scheduled_at_utc=m["ScheduledAtUtc"],
        started_at_utc=m["StartedAtUtc"],
        last_updated_utc=m["LastUpdatedUtc"],
        zombie_retry=bool(m["ZombieRetry"]),
    )


def archive_record(row: Any) -> JobRecord:
    m = row._mapping
    return JobRecord(
        id=m["Id"],
        location=Location.ARCHIVE,
        queue=m["Queue"],
        type=m["Type"],
        payload=m["Payload"],
        tags=m["Tags"],
        attempt_count=m["AttemptCount"],
        worker_id=m["WorkerId"],
        created_by=m["CreatedBy"],
        last_modified_by=m["LastModifiedBy"],
        created_at_utc=m["CreatedAtUtc"],
        started_at_utc=m["StartedAtUtc"],
        finished_at_utc=m["FinishedAtUtc"],
        duration_ms=m["DurationMs"],
    )


def dlq_record(row: Any) -> JobRecord:
    m = row._mapping
    return JobRecord(
        id=m["Id"],
        location=Location.DLQ,
        queue=m["Queue"],
        type=m["Type"],
        payload=m["Payload"],
        tags=m["Tags"],
        attempt_count=m["AttemptCount"],
        worker_id=m["WorkerId"],
        created_by=m["CreatedBy"],
        last_modified_by=m["LastModifiedBy"],
        created_at_utc=m["CreatedAtUtc"],
        failure_reason=FailureReason(m["FailureReason"]),
        error_details=m["ErrorDetails"],
        failed_at_utc=m["FailedAtUtc"],
        heartbeat_utc=m["HeartbeatUtc"],
        started_at_utc=m["StartedAtUtc"],
    )
