"""All settings, validated at start-up. Nested the way the original names them.

Environment variables use the prefix ``CHOKAQ_`` and ``__`` between levels, e.g.
``CHOKAQ_RECOVERY__PROCESSING_ZOMBIE_TIMEOUT=600`` for ``Recovery.ProcessingZombieTimeout``.
Durations are seconds.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from chokaq.domain.errors import ConfigurationError
from chokaq.operations.rules import check_zombie_timeout
from chokaq.redact import redact
from chokaq.runtime.loops import EventLoopName, available

DEFAULT_STORAGE_URL = "sqlite:///./chokaq.db"
ENV_PREFIX = "CHOKAQ_"

# Flat names the original still accepts; they feed the nested Recovery section.
LEGACY_ALIASES = {
    "CHOKAQ_FETCHED_JOB_TIMEOUT_SECONDS": ("recovery", "fetched_job_timeout"),
    "CHOKAQ_ZOMBIE_TIMEOUT_SECONDS": ("recovery", "processing_zombie_timeout"),
}


class CircuitBreakerSettings(BaseModel):
    """Execution.CircuitBreaker.*: a breaker per job type (docs/circuit-breaker.md). Off unless
    Enabled; a handler's ``@app.job(..., breaker=...)`` overrides it for its type."""

    enabled: bool = Field(default=False, description="Execution.CircuitBreaker.Enabled")
    failure_threshold: int = Field(
        default=5,
        ge=1,
        le=1_000_000,
        description="Execution.CircuitBreaker.FailureThreshold: failed attempts within Window that open it",
    )
    window: float = Field(default=60.0, gt=0, description="Execution.CircuitBreaker.Window: seconds")
    open_duration: float = Field(
        default=30.0,
        gt=0,
        description="Execution.CircuitBreaker.OpenDuration: seconds the type is not claimed before probes",
    )
    half_open_probes: int = Field(
        default=1, ge=1, le=1000, description="Execution.CircuitBreaker.HalfOpenProbes: jobs let through half-open"
    )


class ExecutionSettings(BaseModel):
    default_timeout: float = Field(default=15 * 60, gt=0, description="Execution.DefaultTimeout")
    heartbeat_interval_min: float = Field(default=8.0, gt=0, description="Execution.HeartbeatIntervalMin")
    heartbeat_interval_max: float = Field(default=12.0, gt=0, description="Execution.HeartbeatIntervalMax")
    heartbeat_failure_threshold: int = Field(default=10, ge=1)
    cancel_on_heartbeat_failure: bool = False
    concurrency: int = Field(default=10, ge=1, le=1000)
    prefetch: int = Field(default=100, ge=1, le=10_000, description="prefetch buffer size")
    fetch_batch_size: int = Field(default=20, ge=1, le=1000)
    shutdown_grace: float = Field(default=30.0, ge=0)
    circuit_breaker: CircuitBreakerSettings = Field(default_factory=CircuitBreakerSettings)
    job_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = Field(
        default="INFO",
        description="Execution.JobLogLevel: the least level of a `logging` record emitted inside a handler that is "
        "kept with its job (docs/job-logs.md)",
    )
    job_log_max_lines: int = Field(
        default=1_000, ge=10, le=100_000, description="Execution.JobLogMaxLines: log lines kept per job (oldest go)"
    )
    job_log_max_chars: int = Field(
        default=64_000,
        ge=8_000,
        le=10_000_000,
        description="Execution.JobLogMaxChars: characters a job's stored logs hold at most (oldest lines go)",
    )
    health_file: str | None = Field(
        default=None,
        description="Execution.HealthFile: where a worker keeps its health for `chokaq health` (the container "
        "health check); unhealthy once the database has been unreachable for longer than Storage.OutageTolerance",
    )

    event_loop: EventLoopName = Field(
        default="asyncio",
        description="Execution.EventLoop: the loop of a worker that runs its own (`chokaq worker`, Worker.run): "
        "asyncio, or uvloop (pip install 'chokaq[uvloop]'), which costs less per job",
    )

    @model_validator(mode="after")
    def _event_loop_installed(self) -> ExecutionSettings:
        if not available(self.event_loop):
            raise ValueError(
                f"Execution.EventLoop is {self.event_loop!r} but {self.event_loop} is not installed "
                "(pip install 'chokaq[uvloop]')"
            )
        return self

    @model_validator(mode="after")
    def _interval_order(self) -> ExecutionSettings:
        if self.heartbeat_interval_min > self.heartbeat_interval_max:
            raise ValueError(
                "Execution.HeartbeatIntervalMin must not exceed Execution.HeartbeatIntervalMax "
                f"({self.heartbeat_interval_min} > {self.heartbeat_interval_max})"
            )
        return self


class RetrySettings(BaseModel):
    max_attempts: int = Field(default=3, ge=1, le=1000, description="total runs, first included")
    base_delay: float = Field(default=3.0, ge=0)
    backoff_multiplier: float = Field(default=2.0, ge=1.0)
    max_delay: float = Field(default=3600.0, ge=0)
    jitter_max_delay: float = Field(default=1.0, ge=0)
    max_job_age: float = Field(
        default=86400.0,
        gt=0,
        description="Retry.MaxJobAge: seconds; no retry past this age, and a job waiting this long behind an open "
        "circuit breaker goes to the DLQ as CircuitBreakerOpen",
    )


class RecoverySettings(BaseModel):
    scan_interval: float = Field(default=60.0, gt=0)
    fetched_job_timeout: float = Field(default=600.0, gt=0)
    processing_zombie_timeout: float = Field(default=600.0, gt=0)
    worker_retention: float = Field(
        default=7 * 86400.0,
        gt=0,
        description="Recovery.WorkerRetention: seconds a stopped or lost worker's row stays in Workers before the "
        "sweep deletes it (docs/workers.md)",
    )


class SchedulesSettings(BaseModel):
    """Schedules.*: recurring jobs (docs/schedules.md)."""

    poll_interval: float = Field(
        default=1.0,
        gt=0,
        le=3600,
        description="Schedules.PollInterval: seconds between a worker's (or sweep loop's) looks for due schedules; "
        "one indexed read when none is due",
    )
    missed_grace: float = Field(
        default=60.0,
        ge=0,
        description="Schedules.MissedGrace: a slot at most this many seconds old is on time and fires; an older one "
        "was missed, and the schedule's missed-slot policy decides",
    )


class StorageSettings(BaseModel):
    polling_interval: float = Field(default=1.0, gt=0)
    idle_polling_interval: float = Field(default=5.0, gt=0)
    cleanup_batch_size: int = Field(default=1000, ge=1, le=100_000)
    pool_size: int = Field(default=10, ge=1, le=200)
    transient_retries: int = Field(default=5, ge=0, le=50)
    command_timeout: int = Field(
        default=30,
        ge=0,
        le=3600,
        description="SQL Server: seconds a login, statement or lock wait may take before it fails as a "
        "transient error (0 = no limit)",
    )
    outage_tolerance: float = Field(
        default=120.0,
        ge=1,
        description="Storage.OutageTolerance: seconds a worker rides out an unreachable database (an Azure SQL "
        "reconfiguration takes 10-60 s) before it stops claiming and reports unhealthy; finished outcomes are "
        "still kept and retried after that",
    )
    connect_timeout: float = Field(default=10.0, gt=0, description="Storage.ConnectTimeout: seconds per connect")
    statement_timeout: float = Field(
        default=120.0,
        ge=0,
        description="Storage.StatementTimeout: PostgreSQL statement_timeout in seconds (0: none); a statement "
        "that hangs becomes an error the worker retries",
    )
    listen_notify: bool = Field(default=True, description="use LISTEN/NOTIFY on PostgreSQL")
    refresh_statistics: bool = Field(
        default=True,
        description="PostgreSQL: workers check JobsHot about once a second while busy (every 10 s idle) "
        "and ANALYZE it when it holds over twice the rows (or its file over twice the pages) last counted, or "
        "over 10% of it changed and "
        "the last ANALYZE is over 10 s old, instead of waiting a minute or more for autovacuum",
    )
    producer_on_loop: bool = Field(
        default=False,
        description="Storage.ProducerOnLoop: PostgreSQL: enqueue_async runs on the caller's event loop through "
        "psycopg's AsyncConnection instead of on the app's producer threads (docs/producers.md); off by default: "
        "measured on two shared cores, a FastAPI app's concurrent requests waited longer with it",
    )


class QueueSettings(BaseModel):
    """Queues.<name>: written to the queue row by `chokaq db upgrade`; the row is what workers read,
    so the Deck and the API can change it later without a redeploy."""

    zombie_timeout_seconds: int | None = Field(default=None, gt=0)
    max_workers: int | None = Field(default=None, ge=1)
    paused: bool | None = None


class RetentionSettings(BaseModel):
    archive_days: float = Field(default=30.0, gt=0, description="Retention.ArchiveDays")
    dlq_days: float | None = Field(
        default=None,
        gt=0,
        description="Retention.DlqDays: dead jobs that failed longer ago are deleted by the retention run "
        "(the Functions timer, `chokaq retention`); unset = kept until an operator purges them",
    )

    @field_validator("dlq_days", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        # An app setting left empty (local.settings.json, App Service) means "off", not an error.
        return None if isinstance(value, str) and not value.strip() else value


class EventsSettings(BaseModel):
    """The event feed every process writes and every serving process follows (docs/live-events.md)."""

    retention: float = Field(
        default=86400.0,
        gt=0,
        description="Events.Retention: seconds an event stays in the feed (the sweep purges older ones)",
    )
    max_rows: int = Field(
        default=10_000,
        ge=100,
        description="Events.MaxRows: the feed keeps at most this many newest events (the sweep purges the rest)",
    )


class AdminSettings(BaseModel):
    tokens: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description='bearer tokens: {"<token or sha256:hex>": {"name": "...", "role": "viewer|operator|admin"}}',
    )
    trust_app_service_auth: bool = False
    # Trust the header although WEBSITE_AUTH_ENABLED (set by App Service when its authentication
    # is on) is missing: e.g. a proxy of your own that strips and injects the header. Loudly warned.
    trust_app_service_auth_unverified: bool = False
    app_service_role_claim: str = "roles"
    event_poll_interval: float = Field(default=2.0, gt=0)
    allowed_hosts: list[str] = Field(default_factory=list, description="Host header values the API answers to")
    max_event_streams: int = Field(default=200, ge=1, description="open /api/events streams per process")
    max_event_streams_per_principal: int = Field(default=5, ge=1)
    event_stream_max_seconds: float = Field(
        default=300.0, gt=0, description="then the client reconnects and is authorised again"
    )
    exact_count_limit: int = Field(
        default=10_000,
        ge=0,
        le=10_000_000,
        description="Admin.ExactCountLimit: JobsHot and JobsDLQ up to this many rows are counted on every "
        "stats read; a larger table is counted at most every Admin.LargeCountMaxAge seconds and shown with "
        "its age; a list page's total is exact up to this many matches, then a lower bound (docs/admin-figures.md)",
    )
    large_count_max_age: float = Field(
        default=60.0,
        gt=0,
        le=86_400,
        description="Admin.LargeCountMaxAge: seconds a full count of a large table is served before it is "
        "taken again (and never more often than keeps counting under 2% of one connection's time)",
    )


class FunctionsSettings(BaseModel):
    """Functions.*: the doorbell that lets an Azure Functions ``wake`` run start soon after an enqueue
    (docs/functions.md). The database stays the only queue; the doorbell only says "look now"."""

    doorbell_queue: str | None = Field(
        default=None,
        pattern=r"^$|^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$",  # Azure Storage queue names
        description="Azure Storage queue name to ring after an enqueue commits; unset or empty = off",
    )
    doorbell_interval: float = Field(default=1.0, gt=0, le=60, description="at most one ring per queue this often")


class ChokaQSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="ignore",
        case_sensitive=False,
    )

    storage_url: str = DEFAULT_STORAGE_URL
    app: str | None = Field(default=None, description="module:attribute of the ChokaQ app (handlers)")
    worker_name: str | None = None
    execution: ExecutionSettings = Field(default_factory=ExecutionSettings)
    retry: RetrySettings = Field(default_factory=RetrySettings)
    recovery: RecoverySettings = Field(default_factory=RecoverySettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    queues: dict[str, QueueSettings] = Field(default_factory=dict)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    events: EventsSettings = Field(default_factory=EventsSettings)
    schedules: SchedulesSettings = Field(default_factory=SchedulesSettings)
    admin: AdminSettings = Field(default_factory=AdminSettings)
    functions: FunctionsSettings = Field(default_factory=FunctionsSettings)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @model_validator(mode="before")
    @classmethod
    def _legacy_aliases(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for env_name, (section, key) in LEGACY_ALIASES.items():
            raw = os.environ.get(env_name)
            if raw is None:
                continue
            sect = data.get(section)
            sect = dict(sect) if isinstance(sect, dict) else {}
            # The nested name wins when both are given.
            sect.setdefault(key, raw)
            data[section] = sect
        return data

    @model_validator(mode="after")
    def _cross_checks(self) -> ChokaQSettings:
        hb_max = self.execution.heartbeat_interval_max
        check_zombie_timeout("Recovery.ProcessingZombieTimeout", self.recovery.processing_zombie_timeout, hb_max)
        for name, queue in self.queues.items():
            if queue.zombie_timeout_seconds is not None:
                check_zombie_timeout(f"Queues.{name}.ZombieTimeoutSeconds", queue.zombie_timeout_seconds, hb_max)
        if self.retry.base_delay > self.retry.max_delay:
            raise ValueError("Retry.BaseDelay must not exceed Retry.MaxDelay")
        if self.execution.fetch_batch_size > self.execution.prefetch:
            raise ValueError("Execution.FetchBatchSize must not exceed Execution.Prefetch")
        return self


def load_settings(**overrides: Any) -> ChokaQSettings:
    """Read settings from the environment, apply keyword overrides, and refuse bad ones clearly."""
    try:
        return ChokaQSettings(**overrides)
    except SettingsError as exc:  # a JSON value (e.g. CHOKAQ_ADMIN__TOKENS) that does not parse
        raise ConfigurationError(
            f"invalid chokaq settings: {redact(str(exc))} (JSON values must be valid JSON)"
        ) from None
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = list(err["loc"])
            if loc[:2] == ["admin", "tokens"] and len(loc) > 2:
                loc[2] = "<token>"  # the key of Admin.Tokens is the token itself
            where = ".".join(str(p) for p in loc) or "settings"
            lines.append(f"{where}: {err['msg']}")
        raise ConfigurationError(redact("invalid chokaq settings: " + "; ".join(lines))) from None


def _walk(model: type[BaseModel], prefix: str) -> list[str]:
    names: list[str] = []
    for name, info in model.model_fields.items():
        ann = info.annotation
        env = f"{prefix}{name.upper()}"
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            names.extend(_walk(ann, env + "__"))
        else:
            names.append(env)
    return names


def setting_env_names() -> list[str]:
    """Every environment variable the engine reads (Queues.* is open-ended and listed as its root)."""
    return [*_walk(ChokaQSettings, ENV_PREFIX), *LEGACY_ALIASES, *FUNCTIONS_ENV_NAMES]


# Read by the Azure Functions app (function_app.py), listed here so deploy files can be checked.
FUNCTIONS_ENV_NAMES = [
    "CHOKAQ_SWEEP_SCHEDULE",
    "CHOKAQ_RETENTION_SCHEDULE",
    "CHOKAQ_FUNCTIONS_AUTH_LEVEL",
    "CHOKAQ_DRAIN_SCHEDULE",
    "CHOKAQ_DRAIN_SECONDS",
    "CHOKAQ_DRAIN_IDLE_SECONDS",
]
