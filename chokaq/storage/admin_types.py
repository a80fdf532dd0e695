"""What operator actions take and return: filters, the actor, edits, pages and bulk results."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from chokaq.domain import limits
from chokaq.domain.errors import JobValidationError
from chokaq.domain.models import JobRecord
from chokaq.domain.states import FailureReason, JobStatus


@dataclass(frozen=True)
class JobFilter:
    queue: str | None = None
    type: str | None = None
    status: JobStatus | None = None
    failure_reason: FailureReason | None = None
    tag: str | None = None
    from_utc: datetime | None = None
    to_utc: datetime | None = None
    search: str | None = None
    min_attempts: int | None = None  # jobs that needed at least this many attempts (2: more than one)
    worker: str | None = None  # the worker that last ran the job

    def as_json(self) -> dict[str, Any]:
        """The filter as its audit row records it: the fields given, states by their names."""
        out: dict[str, Any] = {}
        for k, v in self.__dict__.items():
            if v is None:
                continue
            if isinstance(v, FailureReason):
                out[k] = v.label
            elif isinstance(v, JobStatus):
                out[k] = v.name.capitalize()
            else:
                out[k] = v
        return out


@dataclass(frozen=True)
class Actor:
    name: str
    role: str

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > limits.MAX_ACTOR_LEN:
            raise JobValidationError(f"actor name must be 1..{limits.MAX_ACTOR_LEN} characters")


@dataclass
class Page:
    items: list[JobRecord]
    total: int
    page: int
    page_size: int
    # More than ``total`` jobs match: the count stopped at its cap (JobListing.count_cap).
    total_is_lower_bound: bool = False


@dataclass
class BulkResult:
    matched: int
    affected: int
    sample_ids: list[str] = field(default_factory=list)
    dry_run: bool = False
    skipped_ids: list[str] = field(default_factory=list)
    # A filter preview's bound: the newest matching job as "<FailedAtUtc ISO>|<Id>". The action
    # that follows acts only on jobs at or before it, so jobs dead-lettered after the preview
    # are never touched by a confirmation that did not count them.
    snapshot: str | None = None
    # A cancel's jobs that a worker held (Fetched or Processing) when they were cancelled.
    was_running: list[str] = field(default_factory=list)


def snapshot_text(failed_at: datetime, job_id: str) -> str:
    """A filter preview's bound, as :attr:`BulkResult.snapshot` carries it."""
    return f"{failed_at.isoformat()}|{job_id}"


def parse_snapshot(text: str) -> tuple[datetime, str]:
    when, sep, job_id = text.partition("|")
    try:
        if not sep or not job_id or len(job_id) > limits.MAX_JOB_ID_LEN:
            raise ValueError
        return datetime.fromisoformat(when), job_id
    except ValueError:
        raise JobValidationError("snapshot is not one a preview returned (dry_run: true gives one)") from None


@dataclass(frozen=True)
class JobEdit:
    payload: str | None = None
    tags: str | None = None
    priority: int | None = None
    force: bool = False

    def is_empty(self) -> bool:
        return self.payload is None and self.tags is None and self.priority is None
