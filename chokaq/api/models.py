"""Request and response bodies of the admin API. Requests forbid unknown fields: only payload,
tags and priority are editable, and a typo is an error, not a silently ignored change."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictInt,
    model_validator,
)

from chokaq.domain import limits
from chokaq.domain.errors import JobValidationError
from chokaq.operations.job_out import JobOut, iso
from chokaq.runtime.events import EventKind
from chokaq.storage import Figures

__all__ = ["JobOut"]  # the public job shape lives beside the operations: the CLI prints it without FastAPI


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("NUL characters are not allowed")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("not valid Unicode (lone surrogate)") from None
    return value


# Text that reaches the database as a bound parameter (never as SQL); NUL is refused because
# PostgreSQL cannot store it.
Text = Annotated[str, AfterValidator(_no_nul)]
QueueName = Annotated[Text, Field(min_length=1, max_length=limits.MAX_QUEUE_LEN)]
TypeName = Annotated[Text, Field(min_length=1, max_length=limits.MAX_TYPE_LEN)]
Tags = Annotated[Text, Field(max_length=limits.MAX_TAGS_LEN)]
JobId = Annotated[Text, Field(min_length=1, max_length=limits.MAX_JOB_ID_LEN)]
# Strict: "36" is not 36 and true is not 1 (pydantic's lax mode coerces both).
Priority = Annotated[StrictInt, Field(ge=-1_000_000, le=1_000_000)]
StrictFloat = Annotated[float, Strict()]


def naive_utc(value: datetime | None) -> datetime | None:
    """Timestamps are stored as naive UTC; convert aware input, refuse what cannot be converted."""
    if value is None or value.tzinfo is None:
        return value
    try:
        return value.astimezone(UTC).replace(tzinfo=None)
    except OverflowError:
        raise JobValidationError(f"timestamp {value.isoformat()} is out of range") from None


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------------------- errors
class FieldError(BaseModel):
    loc: list[str | int]
    msg: str
    type: str = "value_error"


class ErrorOut(BaseModel):
    error: str = Field(
        description="machine-readable code: unauthenticated, forbidden, not_found, conflict, "
        "invalid, validation_error, payload_invalid, ..."
    )
    detail: str | list[FieldError]


# ---------------------------------------------------------------------------- system
class HealthOut(BaseModel):
    status: str
    db: str


class QueueStatsOut(BaseModel):
    queue: str
    pending: int
    fetched: int
    processing: int
    succeeded_total: int
    failed_total: int
    retried_total: int
    dlq_size: int
    oldest_pending_lag_seconds: float | None
    last_activity_utc: str | None


class TotalsOut(BaseModel):
    pending: int = 0
    fetched: int = 0
    processing: int = 0
    succeeded_total: int = 0
    failed_total: int = 0
    retried_total: int = 0
    dlq_size: int = 0
    oldest_pending_lag_seconds: float | None = None


class TopErrorOut(BaseModel):
    type: str
    failure_reason: str
    count: int
    last_failed_utc: str | None
    sample_id: str | None


class FiguresOut(BaseModel):
    """How fresh the sizes are: large tables are counted at most every Admin.LargeCountMaxAge."""

    hot_exact: bool = Field(description="pending/fetched/processing counted by this call")
    dlq_exact: bool = Field(description="dlq_size and top_errors counted by this call")
    counted_at_utc: str | None = Field(description="when the oldest count shown was taken")
    age_seconds: float


def figures_out(f: Figures) -> FiguresOut:
    return FiguresOut(
        hot_exact=f.hot_exact,
        dlq_exact=f.dlq_exact,
        counted_at_utc=iso(f.counted_at_utc),
        age_seconds=round(f.age_seconds, 3),
    )


class StatsOut(BaseModel):
    queues: list[QueueStatsOut]
    totals: TotalsOut
    figures: FiguresOut
    rates: dict[str, dict[str, int]] = Field(description="jobs archived/dead-lettered in the last 1, 5, 15 min")
    top_errors: list[TopErrorOut]


class HandlerOut(BaseModel):
    type: str
    queue: str
    payload_schema: dict[str, Any] | None


class MetaOut(BaseModel):
    role: str
    actor: str
    handlers: list[HandlerOut]
    dev_open: bool


# ---------------------------------------------------------------------------- queues
class QueueOut(BaseModel):
    name: str
    is_paused: bool
    is_active: bool
    zombie_timeout_seconds: int | None
    max_workers: int | None
    last_updated_utc: str | None


class QueueListOut(BaseModel):
    items: list[QueueOut]


class QueuePatchIn(_In):
    """Absent fields are unchanged; ``null`` clears an override."""

    paused: StrictBool | None = None
    zombie_timeout_seconds: StrictInt | None = Field(default=None, gt=0, le=7 * 86400)
    max_workers: StrictInt | None = Field(default=None, ge=1, le=100_000)
    create: StrictBool = Field(default=False, description="create the queue if it does not exist (else 404)")


# ---------------------------------------------------------------------------- jobs
class ZombieOut(BaseModel):
    """Why the sweep called a job a zombie: its heartbeat went silent for longer than the timeout."""

    last_heartbeat_utc: str | None = Field(description="the last heartbeat seen (null: none before it died)")
    silent_seconds: float | None = Field(
        description="from the last heartbeat (or the start, when none) to the rescue that dead-lettered it"
    )
    timeout_seconds: float = Field(description="the queue's zombie timeout as configured now")
    timeout_source: Literal["queue", "default"] = Field(
        description="queue: the queue's ZombieTimeoutSeconds; default: Recovery.ProcessingZombieTimeout"
    )
    worker_id: str | None = Field(description="the worker that held the job")
    handler_idempotent: bool | None = Field(
        description="the handler declared itself idempotent (null: no handler for this type in the serving process)"
    )
    handler_retries_zombies: bool | None = Field(description="the handler asked for its zombies to be retried")


class DlqJobOut(JobOut):
    payload_schema: dict[str, Any] | None = Field(
        description="JSON schema of the handler's payload model, when the type has one"
    )
    zombie: ZombieOut | None = Field(default=None, description="heartbeat details, for jobs dead-lettered as Zombie")


class JobPageOut(BaseModel):
    items: list[JobOut]
    total: int = Field(description="the matching jobs; a lower bound when total_is_lower_bound")
    page: int
    page_size: int
    total_is_lower_bound: bool = Field(
        default=False,
        description="more jobs match than ``total``: past Admin.ExactCountLimit matches the count stops "
        "(a page costs the same at a million rows as at a thousand); show it as at least ``total``",
    )


class EnqueueIn(_In):
    type: TypeName
    payload: Any = Field(default=None, description="any JSON value; validated by the handler's model if any")
    queue: QueueName | None = Field(default=None, description="default: the handler's queue, else 'default'")
    priority: Priority = limits.DEFAULT_PRIORITY
    delay_seconds: StrictFloat = Field(default=0.0, ge=0, le=366 * 86400)
    at: AwareDatetime | None = Field(
        default=None, description="run at this time (ISO 8601 with its offset); not with delay_seconds"
    )
    tags: Tags | None = None
    idempotency_key: Annotated[Text, Field(min_length=1, max_length=limits.MAX_IDEMPOTENCY_KEY_LEN)] | None = None


class RescheduleIn(_In):
    at: AwareDatetime | None = Field(default=None, description="the new due time (ISO 8601 with its offset)")
    now: StrictBool = Field(default=False, description="or: due now")

    @model_validator(mode="after")
    def _one_time(self) -> RescheduleIn:
        if self.now == (self.at is not None):
            raise ValueError('give "at" (a time with its offset) or "now": true, one of them')
        return self


class EnqueueOut(BaseModel):
    id: str
    created: bool


class _PayloadEdit(_In):
    payload: Any = Field(default=None, description="the new payload as a JSON value")
    payload_text: str | None = Field(
        default=None, description="or: the new payload as JSON text (what an editor holds); must parse"
    )
    tags: Tags | None = None
    force: StrictBool = Field(default=False, description="admin only: store a payload the handler's model rejects")

    @model_validator(mode="after")
    def _one_payload(self) -> _PayloadEdit:
        if "payload" in self.model_fields_set and self.payload_text is not None:
            raise ValueError("give payload or payload_text, not both")
        return self

    def has_payload(self) -> bool:
        return "payload" in self.model_fields_set or self.payload_text is not None


class JobEditIn(_PayloadEdit):
    priority: Priority | None = None


class DlqEditIn(_PayloadEdit):
    pass


StepsChoice = Literal["resume", "scratch"]
_STEPS = (
    "its step journal (docs/steps.md): resume after the finished steps (the default when it has one) "
    "or from scratch (the journal cleared); audited with the choice"
)


class ResurrectIn(_PayloadEdit):
    priority: Priority | None = Field(default=None, description=f"default {limits.DEFAULT_PRIORITY}")
    steps: StepsChoice | None = Field(default=None, description=_STEPS)
    keep_steps: StrictBool = Field(
        default=False, description="with a payload edit: keep the journal (an edit clears it otherwise); audited"
    )

    @model_validator(mode="after")
    def _keep_or_scratch(self) -> ResurrectIn:
        if self.keep_steps and self.steps == "scratch":
            raise ValueError("keep_steps keeps the journal; steps=scratch clears it: choose one")
        return self


class IdsIn(_In):
    ids: list[JobId] = Field(min_length=1, max_length=limits.MAX_BULK_IDS)


class CancelIn(IdsIn):
    running: StrictBool = Field(
        default=False,
        description="also cancel jobs a worker holds (Fetched, Processing): its handler is told to stop",
    )
    reason: Annotated[Text, Field(max_length=500)] | None = Field(
        default=None, description="why, recorded in ErrorDetails and the audit log"
    )


class CancelOut(BaseModel):
    cancelled: int
    skipped_ids: list[str]
    was_running: list[str] = Field(
        default_factory=list, description="the cancelled jobs a worker held; their handlers are told to stop"
    )


class DlqFilterIn(_In):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    queue: QueueName | None = None
    type: TypeName | None = None
    failure_reason: Annotated[Text, Field(max_length=40)] | StrictInt | None = Field(
        default=None, description="name (e.g. Zombie, FatalError) or number"
    )
    tag: Tags | None = None
    from_: datetime | None = Field(default=None, alias="from")
    to: datetime | None = None
    search: Annotated[Text, Field(max_length=200)] | None = None
    worker: Annotated[Text, Field(max_length=limits.MAX_WORKER_ID_LEN)] | None = Field(
        default=None, description="the worker that held the job (a crash incident: with failure_reason Zombie)"
    )

    def is_empty(self) -> bool:
        return all(
            v is None or v == ""
            for v in (
                self.queue,
                self.type,
                self.failure_reason,
                self.tag,
                self.from_,
                self.to,
                self.search,
                self.worker,
            )
        )


class BulkIn(_In):
    ids: list[JobId] | None = Field(default=None, max_length=limits.MAX_BULK_IDS)
    filter: DlqFilterIn | None = None
    all: StrictBool = Field(default=False, description="with an empty filter: yes, every dead job")
    max_jobs: StrictInt = Field(default=limits.DEFAULT_BULK_MAX_JOBS, ge=1, le=limits.MAX_BULK_IDS)
    dry_run: StrictBool = False
    expected_count: StrictInt | None = Field(
        default=None,
        ge=0,
        le=1_000_000_000,
        description="a filter action: the `matched` count of the preview the operator confirmed; 409 if more match now",
    )
    snapshot: Annotated[Text, Field(max_length=100)] | None = Field(
        default=None, description="a filter action: the preview's `snapshot`; only jobs inside it are touched"
    )

    @model_validator(mode="after")
    def _ids_or_filter(self) -> BulkIn:
        if (self.ids is None) == (self.filter is None):
            raise ValueError("give either ids or filter")
        if self.filter is not None and self.filter.is_empty() and not self.all:
            raise ValueError('an empty filter matches every dead job: send "all": true to mean that')
        if (
            self.filter is not None
            and not self.dry_run
            and (self.expected_count is None or (self.expected_count > 0 and self.snapshot is None))
        ):
            raise ValueError(
                "preview first (dry_run: true), then send its matched count as expected_count and its snapshot"
            )
        return self


class ResurrectManyIn(BulkIn):
    steps: StepsChoice | None = Field(default=None, description=_STEPS)


class BulkOut(BaseModel):
    matched: int
    affected: int
    sample_ids: list[str]
    dry_run: bool
    skipped_ids: list[str]
    snapshot: str | None = Field(default=None, description="a filter preview's bound: send it back with the action")


class ArchivePurgeIn(_In):
    older_than: datetime = Field(description="delete archived jobs finished before this UTC time")


class ArchivePurgeOut(BaseModel):
    deleted: int


# ---------------------------------------------------------------------------- audit and events
class AuditOut(BaseModel):
    id: int
    at_utc: str | None
    actor: str
    role: str
    action: str
    job_ids: list[str]
    job_count: int
    details: Any


class AuditPageOut(BaseModel):
    items: list[AuditOut]
    total: int
    page: int
    page_size: int
    total_is_lower_bound: bool = Field(
        default=False,
        description="more entries match than ``total``: past Admin.ExactCountLimit matches the count stops "
        "(a page costs the same at a million rows as at a thousand); show it as at least ``total``",
    )


class EventOut(BaseModel):
    model_config = ConfigDict(extra="allow")

    kind: EventKind
    at: float


class RecentEventsOut(BaseModel):
    events: list[EventOut]
    now: float = Field(description="pass as ?after= on the next poll")
    cursor: int = Field(0, description="the event feed's newest id seen: pass as ?cursor= on the next poll")


class IncidentOut(BaseModel):
    """The zombies one worker left (docs/steps.md): decide for those still in the DLQ with a bulk
    action filtered by ``worker`` and ``failure_reason: Zombie`` (preview first, as always). Those
    that the sweep retried or that left the DLQ since (within Recovery.WorkerRetention) still count."""

    worker_id: str | None
    jobs: int = Field(description="all its zombies: retried + undecided + resurrected + purged + verified")
    retried: int = Field(description="sent back to Pending by the sweep (retry_zombies): they never reached the DLQ")
    undecided: int = Field(description="in the DLQ now: they need a decision")
    resurrected: int = Field(description="left the DLQ by a resurrect (resume or from scratch)")
    purged: int = Field(description="purged from the DLQ")
    verified: int = Field(description="judged by the handler's verify: archived (done) or back to Pending (not done)")
    last_seen_utc: str | None = Field(description="the last heartbeat of any of its jobs")
    first_failed_utc: str | None
    last_failed_utc: str | None
    inside_step: int = Field(description="undecided ones stopped inside a step: a start never confirmed")
    between_steps: int = Field(description="undecided ones whose every recorded step had finished")
    without_steps: int = Field(description="undecided ones without a step journal")
    sample_ids: list[str] = Field(description="undecided ones, up to 20")


class IncidentsOut(BaseModel):
    items: list[IncidentOut]
    capped: bool = Field(description="only the newest zombies were read (a very large DLQ)")
