"""Records that cross the storage boundary, and the validated input to enqueue and edits."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from chokaq.domain import limits
from chokaq.domain.keys import check_key
from chokaq.domain.payload import check_payload_size, check_payload_text, encode_payload
from chokaq.domain.states import FailureReason, JobStatus, Location

__all__ = ["check_payload_size", "check_payload_text", "encode_payload"]


# Validation context key: the payload text that already passed the gate (see EnqueueRequest).
PAYLOAD_CHECKED = "payload_checked"


class EnqueueRequest(BaseModel):
    """What a producer asks for. Validated before anything touches the database."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(min_length=1, max_length=limits.MAX_TYPE_LEN)
    payload: str = "{}"
    queue: str = Field(default="default", min_length=1, max_length=limits.MAX_QUEUE_LEN)
    priority: int = Field(default=limits.DEFAULT_PRIORITY, ge=-1_000_000, le=1_000_000)
    delay_seconds: float = Field(default=0.0, ge=0, le=366 * 86400)
    # Due at this instant instead (naive UTC, see chokaq.domain.when); exclusive with a delay.
    scheduled_at: datetime | None = None
    tags: str | None = Field(default=None, max_length=limits.MAX_TAGS_LEN)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=limits.MAX_IDEMPOTENCY_KEY_LEN)
    created_by: str | None = Field(default=None, max_length=limits.MAX_ACTOR_LEN)

    @field_validator("payload")
    @classmethod
    def _payload_is_json(cls, value: str, info: ValidationInfo) -> str:
        checked: object = info.context.get(PAYLOAD_CHECKED) if info.context is not None else None
        if checked is value:
            # Just made by encode_payload, which passed it through the gate: a second parse
            # was a sixth of an enqueue's CPU.
            return value
        return check_payload_text(value)

    @field_validator("type", "queue", "idempotency_key")
    @classmethod
    def _keys_have_no_edge_whitespace(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else check_key(str(info.field_name), value)

    @model_validator(mode="after")
    def _one_due_time(self) -> EnqueueRequest:
        if self.scheduled_at is not None:
            if self.delay_seconds:
                raise ValueError("give a delay or a time to run at, not both")
            if self.scheduled_at.tzinfo is not None:
                raise ValueError("scheduled_at is naive UTC (see chokaq.domain.when.utc_naive)")
        return self


@dataclass(frozen=True, slots=True)
class Enqueued:
    """One job of an enqueue: its id, and whether this call stored it (False: an idempotency key
    met a live job already stored under it, whose id this is)."""

    id: str
    created: bool


@dataclass(frozen=True, slots=True)
class Lease:
    """Proof of ownership a worker presents with every move: the fence."""

    job_id: str
    worker_id: str
    attempt: int


@dataclass(slots=True)
class JobRecord:
    """A job as read from whichever table holds it."""

    id: str
    location: Location
    queue: str
    type: str
    payload: str
    tags: str | None
    attempt_count: int
    worker_id: str | None
    created_by: str | None
    last_modified_by: str | None
    created_at_utc: datetime | None
    status: JobStatus | None = None
    priority: int | None = None
    idempotency_key: str | None = None
    heartbeat_utc: datetime | None = None
    scheduled_at_utc: datetime | None = None
    started_at_utc: datetime | None = None
    last_updated_utc: datetime | None = None
    finished_at_utc: datetime | None = None
    duration_ms: int | None = None
    failure_reason: FailureReason | None = None
    error_details: str | None = None
    failed_at_utc: datetime | None = None
    zombie_retry: bool = False
    attempts: str | None = None  # the attempt history as stored (JSON text; chokaq.domain.attempts)
    logs: str | None = None  # the handler's log lines as stored (JSON text; chokaq.domain.job_logs)
    progress: str | None = None  # its progress as stored (JSON text), as the heartbeat last wrote it

    @property
    def lease(self) -> Lease:
        if self.worker_id is None:
            raise ValueError(f"job {self.id} has no worker")
        return Lease(self.id, self.worker_id, self.attempt_count)

    def payload_json(self) -> Any:
        return json.loads(self.payload)


@dataclass(frozen=True, slots=True)
class SweepResult:
    recovered: int
    archived: int
    retried_zombies: int = 0
    zombie_ids: list[str] = field(default_factory=list)
    # Pending jobs past Retry.MaxJobAge behind an open circuit breaker, moved to the DLQ.
    breaker_expired: int = 0

    def as_dict(self) -> dict[str, int]:
        out = {"recovered": self.recovered, "archived": self.archived}
        if self.breaker_expired:
            out["breaker_expired"] = self.breaker_expired
        return out


@dataclass(frozen=True, slots=True)
class QueueInfo:
    name: str
    is_paused: bool
    is_active: bool
    zombie_timeout_seconds: int | None
    max_workers: int | None
    last_updated_utc: datetime | None


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue: str
    pending: int
    fetched: int
    processing: int
    succeeded_total: int
    failed_total: int
    retried_total: int
    dlq_size: int
    oldest_pending_lag_seconds: float | None
    last_activity_utc: datetime | None
