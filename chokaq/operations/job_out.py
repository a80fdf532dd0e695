"""The one public shape of a job: what ``GET /api/jobs/{id}`` answers and ``chokaq job show`` prints.

Pydantic only (no FastAPI), so the CLI uses it without loading the web stack.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, Self

from pydantic import BaseModel, Field

from chokaq.domain.attempts import timeline
from chokaq.domain.job_logs import parse_logs, parse_progress
from chokaq.domain.models import JobRecord
from chokaq.domain.payload import readable
from chokaq.domain.states import Location
from chokaq.domain.steps import StepRecord


def iso(value: datetime | None) -> str | None:
    """A stored timestamp (naive UTC) as ISO 8601 with its ``Z``."""
    return value.isoformat() + ("Z" if value.tzinfo is None else "") if value else None


class AttemptOut(BaseModel):
    """One attempt that did not succeed, or a resurrect (``chokaq.domain.attempts``)."""

    attempt: int
    outcome: str = Field(description="retried, dead-lettered, worker lost or resurrected")
    ended_utc: str
    worker: str | None = None
    started_utc: str | None = None
    duration_ms: int | None = None
    reason: str | None = Field(default=None, description="the failure reason, as the DLQ names it")
    error_type: str | None = None
    message: str | None = None
    traceback: str | None = None
    by: str | None = Field(default=None, description="who resurrected the job")
    dropped_after: int | None = Field(
        default=None, description="entries dropped after this one to keep the history bounded (first and latest kept)"
    )


def attempts_of(rec: JobRecord) -> list[AttemptOut]:
    """The job's attempt timeline; entries a newer version wrote with unknown fields are kept as
    far as they fit, and unreadable ones skipped (history is evidence, never a reason to fail)."""
    out = []
    entries = timeline(
        rec.attempts,
        dead=rec.location is Location.DLQ,
        attempt=rec.attempt_count,
        reason=rec.failure_reason.label if rec.failure_reason is not None else None,
        worker=rec.worker_id,
        started=rec.started_at_utc,
        failed_at=rec.failed_at_utc,
        details=rec.error_details,
    )
    for entry in entries:
        try:
            out.append(AttemptOut.model_validate(entry))
        except ValueError:
            continue
    return out


class LogLineOut(BaseModel):
    """One line a handler logged (``ctx.log`` or a captured ``logging`` record)."""

    at_ms: int | None = Field(default=None, description="when, in epoch milliseconds")
    level: str
    logger: str | None = Field(default=None, description="the logger's name, for a captured logging record")
    message: str
    fields: dict[str, Any] | None = Field(default=None, description="ctx.log's keyword fields")


class JobLogsOut(BaseModel):
    """What the handler of the job's latest attempt that logged said, oldest first (bounded)."""

    attempt: int | None = None
    worker: str | None = None
    dropped: int = Field(default=0, description="older lines dropped to keep the logs bounded")
    lines: list[LogLineOut]


class ProgressOut(BaseModel):
    done: float
    total: float | None = None
    note: str | None = None
    at_ms: int | None = Field(default=None, description="when the handler reported it, in epoch milliseconds")


def logs_of(rec: JobRecord) -> JobLogsOut | None:
    value = parse_logs(rec.logs)
    try:
        return JobLogsOut.model_validate(value) if value is not None else None
    except ValueError:  # evidence, never a reason for a read to fail
        return None


def progress_of(rec: JobRecord) -> ProgressOut | None:
    value = parse_progress(rec.progress)
    try:
        return ProgressOut.model_validate(value) if value is not None else None
    except ValueError:  # evidence, never a reason for a read to fail (as for the logs)
        return None


class StepOut(BaseModel):
    """One step of the job's journal (docs/steps.md)."""

    name: str
    state: Literal["done", "started", "failed"] = Field(
        description="done; started (never confirmed: its outcome is unknown); failed (its body raised: it runs again)"
    )
    attempt: int = Field(description="the attempt that ran it (or marked it done)")
    worker: str
    started_utc: str | None
    done_utc: str | None = Field(default=None, description="when it was confirmed done (or failed)")
    result: Any = Field(default=None, description="the JSON result recorded (failed: its error)")


def steps_out(records: Sequence[StepRecord]) -> list[StepOut]:
    out = []
    for r in records:
        try:
            result = r.value()
        except ValueError:  # written by something else than chokaq: shown as text
            result = r.result
        out.append(
            StepOut(
                name=r.name,
                state=r.state,
                attempt=r.attempt,
                worker=r.worker_id,
                started_utc=iso(r.started_at_utc),
                done_utc=iso(r.done_at_utc),
                result=result,
            )
        )
    return out


class JobOut(BaseModel):
    """A job wherever it is (hot, archive or DLQ); fields a table lacks are null."""

    id: str
    location: Literal["hot", "archive", "dlq"]
    status: str | None
    queue: str
    type: str
    payload: Any
    payload_invalid: bool = Field(
        default=False,
        description="the stored payload is not valid under the payload "
        "gate (written by an older version or by SQL): payload is a truncated preview",
    )
    payload_problem: str | None = None
    tags: str | None
    priority: int | None
    idempotency_key: str | None
    attempt_count: int
    failure_reason: str | None
    error_details: str | None
    worker_id: str | None
    heartbeat_utc: str | None
    scheduled_at_utc: str | None
    created_at_utc: str | None
    started_at_utc: str | None
    last_updated_utc: str | None
    finished_at_utc: str | None
    failed_at_utc: str | None
    duration_ms: int | None
    created_by: str | None
    last_modified_by: str | None
    attempts: list[AttemptOut] | None = Field(
        default=None,
        description="every attempt that did not succeed, and resurrects, oldest first (a job's own read; "
        "null in lists)",
    )
    logs: JobLogsOut | None = Field(
        default=None, description="what the handler logged (a job's own read; null in lists and when it logged nothing)"
    )
    progress: ProgressOut | None = Field(
        default=None, description="how far the handler said it got (a job's own read; null in lists)"
    )

    steps: list[StepOut] | None = Field(
        default=None, description="the step journal, in the order the steps started (a job's own read; null in lists)"
    )

    @classmethod
    def from_record(cls, rec: JobRecord, *, history: bool = True, **extra: Any) -> Self:
        """The shape of ``rec``; ``extra`` fills the fields a subclass adds (``DlqJobOut``).
        ``history``: with the attempt timeline (lists leave it out: they do not read it)."""
        payload, problem = readable(rec.payload)
        return cls(
            id=rec.id,
            location=rec.location.value,
            status=rec.status.name.capitalize() if rec.status is not None else None,
            queue=rec.queue,
            type=rec.type,
            payload=payload,
            payload_invalid=problem is not None,
            payload_problem=problem,
            tags=rec.tags,
            priority=rec.priority,
            idempotency_key=rec.idempotency_key,
            attempt_count=rec.attempt_count,
            failure_reason=rec.failure_reason.label if rec.failure_reason is not None else None,
            error_details=rec.error_details,
            worker_id=rec.worker_id,
            heartbeat_utc=iso(rec.heartbeat_utc),
            scheduled_at_utc=iso(rec.scheduled_at_utc),
            created_at_utc=iso(rec.created_at_utc),
            started_at_utc=iso(rec.started_at_utc),
            last_updated_utc=iso(rec.last_updated_utc),
            finished_at_utc=iso(rec.finished_at_utc),
            failed_at_utc=iso(rec.failed_at_utc),
            duration_ms=rec.duration_ms,
            created_by=rec.created_by,
            last_modified_by=rec.last_modified_by,
            attempts=attempts_of(rec) if history else None,
            logs=logs_of(rec) if history else None,
            progress=progress_of(rec) if history else None,
            **extra,
        )
