"""Table definitions. Names follow the original ChokaQ so DBAs who know it feel at home.

Differences from the original, on purpose:
- ``JobsHot.ScheduledAtUtc`` is NOT NULL (set to the enqueue time when not delayed) so the fetch
  index orders and filters on one column.
- ``JobsHot.ZombieRetry`` is stamped by the worker at start: the handler declared itself
  idempotent and asked for its zombies to be retried instead of dead-lettered. The sweep reads
  it, so the policy holds whichever process runs the sweep.
- ``AuditLog`` persists every operator action (the original only logs).
- SQL Server: text users supply is NVARCHAR, and keys (ids, queue, type, idempotency key, worker
  id) compare under a binary collation, case- and accent-sensitive as PostgreSQL compares them.
  The ULID-keyed tables append to their clustered keys, so those keys ask SQL Server 2019+ for
  ``OPTIMIZE_FOR_SEQUENTIAL_KEY``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Unicode,
    UnicodeText,
    false,
    text,
    true,
)
from sqlalchemy.dialects import mssql
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateIndex
from sqlalchemy.sql.compiler import DDLCompiler, GenericTypeCompiler
from sqlalchemy.types import TypeEngine

from chokaq.domain import limits
from chokaq.domain.steps import MAX_STEP_NAME_LEN

SCHEMA = "chokaq"

metadata = MetaData(schema=SCHEMA)

# nvarchar(max) on SQL Server, text elsewhere.
LongText = UnicodeText().with_variant(mssql.NVARCHAR(None), "mssql")
# A stored progress (chokaq.domain.job_logs): its note is capped at 200 characters, escaped at most 12x.
PROGRESS_LEN = 4000
# datetime2(7) on SQL Server: DATETIME would round to 3.33 ms and break ordering.
UtcTime = DateTime().with_variant(mssql.DATETIME2(precision=7), "mssql")  # type: ignore[no-untyped-call]
Flag = Boolean().with_variant(mssql.BIT(), "mssql")

# Binary code-point comparison: "abc" and "ABC" are two keys, as in PostgreSQL. (SQL Server still
# ignores trailing spaces in comparisons, so the domain refuses keys with edge whitespace.)
KEY_COLLATION = "Latin1_General_100_BIN2"
# Tables whose clustered key is appended to (ULIDs, an identity).
SEQUENTIAL_KEY = "chokaq_sequential_key"


class MssqlKey(mssql.NVARCHAR):
    """NVARCHAR(n) declared with :data:`KEY_COLLATION` in a column definition. Only there: the
    statements cast JSON values to the column's type, and ``CAST(x AS NVARCHAR(n) COLLATE ...)`` is
    not valid T-SQL (the cast result takes the column's collation when compared anyway)."""


class MssqlAsciiKey(mssql.VARCHAR):
    """VARCHAR(n) with :data:`KEY_COLLATION` for keys chokaq generates (ULIDs: ASCII)."""


def _with_collation(rendered: str, kw: dict[str, Any]) -> str:
    return f"{rendered} COLLATE {KEY_COLLATION}" if isinstance(kw.get("type_expression"), Column) else rendered


@compiles(MssqlKey, "mssql")
def _compile_key(type_: MssqlKey, compiler: GenericTypeCompiler, **kw: Any) -> str:
    return _with_collation(compiler.visit_NVARCHAR(type_, **kw), kw)


@compiles(MssqlAsciiKey, "mssql")
def _compile_ascii_key(type_: MssqlAsciiKey, compiler: GenericTypeCompiler, **kw: Any) -> str:
    return _with_collation(compiler.visit_VARCHAR(type_, **kw), kw)


def Key(length: int) -> TypeEngine[str]:
    """A key users supply (queue, type, idempotency key, worker id)."""
    return String(length).with_variant(MssqlKey(length), "mssql")


def IdKey(length: int) -> TypeEngine[str]:
    return String(length).with_variant(MssqlAsciiKey(length), "mssql")


def sequential_key_supported(dialect: Dialect) -> bool:
    """OPTIMIZE_FOR_SEQUENTIAL_KEY exists from SQL Server 2019 (15.x) and on Azure SQL, which reports
    12.x. 2016/2017 (13.x, 14.x) lack it; the scripts (no server known) carry it."""
    version = getattr(dialect, "server_version_info", None)
    return not version or not (13 <= version[0] < 15)


# Secondary indexes whose first key only grows (a finish or failure time, an audit time, the
# in-flight indexes' stamps) get the same last-page pacing: ``mssql_sequential_key=True``.
Index.argument_for("mssql", "sequential_key", False)


@compiles(CreateIndex, "mssql")
def _compile_create_index(create: CreateIndex, compiler: DDLCompiler, **kw: Any) -> str:
    text_ = str(compiler.visit_create_index(create, **kw))  # type: ignore[no-untyped-call]
    if create.element.dialect_options["mssql"]["sequential_key"] and sequential_key_supported(compiler.dialect):
        text_ += " WITH (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)"
    return text_


@compiles(PrimaryKeyConstraint, "mssql")
def _compile_primary_key(constraint: PrimaryKeyConstraint, compiler: DDLCompiler, **kw: Any) -> str:
    text_ = str(compiler.visit_primary_key_constraint(constraint, **kw))
    table = constraint.table
    if not text_ or not table.info.get(SEQUENTIAL_KEY):
        return text_
    text_ = text_.replace("PRIMARY KEY (", "PRIMARY KEY CLUSTERED (", 1)
    if sequential_key_supported(compiler.dialect):
        text_ += " WITH (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)"
    return text_


def _job_columns() -> list[Column[Any]]:
    return [
        Column("Id", IdKey(limits.MAX_JOB_ID_LEN), primary_key=True),
        Column("Queue", Key(limits.MAX_QUEUE_LEN), nullable=False),
        Column("Type", Key(limits.MAX_TYPE_LEN), nullable=False),
        Column("Payload", LongText, nullable=False),
        Column("Tags", Unicode(limits.MAX_TAGS_LEN)),
    ]


jobs_hot = Table(
    "JobsHot",
    metadata,
    *_job_columns(),
    Column("IdempotencyKey", Key(limits.MAX_IDEMPOTENCY_KEY_LEN)),
    Column("Priority", Integer, nullable=False, server_default=text("10")),
    Column("Status", Integer, nullable=False, server_default=text("0")),
    Column("AttemptCount", Integer, nullable=False, server_default=text("0")),
    Column("WorkerId", Key(limits.MAX_WORKER_ID_LEN)),
    Column("HeartbeatUtc", UtcTime),
    Column("ScheduledAtUtc", UtcTime, nullable=False),
    Column("CreatedAtUtc", UtcTime, nullable=False),
    Column("StartedAtUtc", UtcTime),
    Column("LastUpdatedUtc", UtcTime, nullable=False),
    Column("CreatedBy", Unicode(limits.MAX_ACTOR_LEN)),
    Column("LastModifiedBy", Unicode(limits.MAX_ACTOR_LEN)),
    Column("ZombieRetry", Flag, nullable=False, server_default=false()),
    # The attempt history (JSON text, chokaq.domain.attempts): NULL until an attempt fails.
    Column("Attempts", LongText),
    # What the handler logged and how far it got (JSON text, chokaq.domain.job_logs): NULL until it says.
    Column("Logs", LongText),
    Column("Progress", Unicode(PROGRESS_LEN)),
    info={SEQUENTIAL_KEY: True},
)

Index(
    "IX_JobsHot_Fetch",
    jobs_hot.c.Queue,
    jobs_hot.c.Priority.desc(),
    jobs_hot.c.ScheduledAtUtc,
    jobs_hot.c.CreatedAtUtc,
    postgresql_where=jobs_hot.c.Status == 0,
    sqlite_where=jobs_hot.c.Status == 0,
    mssql_where=jobs_hot.c.Status == 0,
    # SQL Server's one claim index (every claim reads it, docs/sqlserver.md): with Type beside the
    # keys, the breaker filter and the probes' type are read from it too, never from the row.
    mssql_include=["Type"],
)
# Workers serving every queue walk this one in claim order instead of sorting all Pending rows.
Index(
    "IX_JobsHot_FetchAny",
    jobs_hot.c.Priority.desc(),
    jobs_hot.c.ScheduledAtUtc,
    jobs_hot.c.CreatedAtUtc,
    postgresql_where=jobs_hot.c.Status == 0,
    sqlite_where=jobs_hot.c.Status == 0,
    mssql_where=jobs_hot.c.Status == 0,
)
Index(
    "IX_JobsHot_FetchedRecovery",
    jobs_hot.c.LastUpdatedUtc,
    postgresql_where=jobs_hot.c.Status == 1,
    sqlite_where=jobs_hot.c.Status == 1,
    mssql_where=jobs_hot.c.Status == 1,
    mssql_sequential_key=True,
)
Index(
    "IX_JobsHot_ProcessingHeartbeat",
    jobs_hot.c.HeartbeatUtc,
    jobs_hot.c.LastUpdatedUtc,
    postgresql_where=jobs_hot.c.Status == 2,
    sqlite_where=jobs_hot.c.Status == 2,
    mssql_where=jobs_hot.c.Status == 2,
    mssql_sequential_key=True,
)
Index(
    "UX_JobsHot_IdempotencyKey",
    jobs_hot.c.IdempotencyKey,
    unique=True,
    postgresql_where=jobs_hot.c.IdempotencyKey.isnot(None),
    sqlite_where=jobs_hot.c.IdempotencyKey.isnot(None),
    mssql_where=jobs_hot.c.IdempotencyKey.isnot(None),
)
# No index on WorkerId: a worker's moves name their rows by Id (see migration 2).
Index("IX_JobsHot_QueueStatus", jobs_hot.c.Queue, jobs_hot.c.Status)

jobs_archive = Table(
    "JobsArchive",
    metadata,
    *_job_columns(),
    Column("AttemptCount", Integer, nullable=False),
    Column("WorkerId", Key(limits.MAX_WORKER_ID_LEN)),
    Column("CreatedBy", Unicode(limits.MAX_ACTOR_LEN)),
    Column("LastModifiedBy", Unicode(limits.MAX_ACTOR_LEN)),
    Column("CreatedAtUtc", UtcTime, nullable=False),
    Column("StartedAtUtc", UtcTime),
    Column("FinishedAtUtc", UtcTime, nullable=False),
    Column("DurationMs", BigInteger),
    # When the last attempt was due (copied from JobsHot): queue wait is StartedAtUtc minus this.
    # NULL for jobs archived before migration 4.
    Column("ScheduledAtUtc", UtcTime),
    Column("Attempts", LongText),
    Column("Logs", LongText),
    Column("Progress", Unicode(PROGRESS_LEN)),
    info={SEQUENTIAL_KEY: True},
)
# The history's columns (storage/history.py) ride in both archive time indexes on SQL Server, so a
# 24 h or 7 d chart reads a range of one of them and never the clustered rows (payloads included).
HISTORY_ARCHIVE_COLUMNS = ["StartedAtUtc", "ScheduledAtUtc", "CreatedAtUtc", "DurationMs"]
Index(
    "IX_JobsArchive_FinishedAt",
    jobs_archive.c.FinishedAtUtc,
    mssql_include=HISTORY_ARCHIVE_COLUMNS,
    mssql_sequential_key=True,
)
Index(
    "IX_JobsArchive_QueueFinished",
    jobs_archive.c.Queue,
    jobs_archive.c.FinishedAtUtc,
    mssql_include=HISTORY_ARCHIVE_COLUMNS,
)

jobs_dlq = Table(
    "JobsDLQ",
    metadata,
    *_job_columns(),
    Column("FailureReason", Integer, nullable=False),
    Column("ErrorDetails", LongText),
    Column("AttemptCount", Integer, nullable=False),
    Column("WorkerId", Key(limits.MAX_WORKER_ID_LEN)),
    Column("CreatedBy", Unicode(limits.MAX_ACTOR_LEN)),
    Column("LastModifiedBy", Unicode(limits.MAX_ACTOR_LEN)),
    Column("CreatedAtUtc", UtcTime, nullable=False),
    Column("FailedAtUtc", UtcTime, nullable=False),
    # The last heartbeat seen: the inspector shows it beside a zombie's failure time.
    Column("HeartbeatUtc", UtcTime),
    Column("StartedAtUtc", UtcTime),
    Column("Attempts", LongText),
    Column("Logs", LongText),
    Column("Progress", Unicode(PROGRESS_LEN)),
    info={SEQUENTIAL_KEY: True},
)
# FailureReason included: the DLQ history reads it (IX_JobsDLQ_QueueReason has it as a key).
Index(
    "IX_JobsDLQ_FailedAt",
    jobs_dlq.c.FailedAtUtc,
    jobs_dlq.c.Id,
    mssql_include=["FailureReason"],
    mssql_sequential_key=True,
)
# Id last: filtered DLQ pages sort by (FailedAtUtc, Id) and read this index in order.
Index("IX_JobsDLQ_QueueReason", jobs_dlq.c.Queue, jobs_dlq.c.FailureReason, jobs_dlq.c.FailedAtUtc, jobs_dlq.c.Id)
Index("IX_JobsDLQ_Type", jobs_dlq.c.Type, jobs_dlq.c.FailedAtUtc)
# A failure reason alone (the Deck's reason filter): without it a rare reason's page and count
# read the whole DLQ (IX_JobsDLQ_QueueReason leads with the queue). Migration 14.
reason_index = Index("IX_JobsDLQ_Reason", jobs_dlq.c.FailureReason, jobs_dlq.c.FailedAtUtc, jobs_dlq.c.Id)
# The Workers page's zombies per worker (docs/workers.md); only zombie rows are indexed (reason 2).
zombie_worker_index = Index(
    "IX_JobsDLQ_ZombieWorker",
    jobs_dlq.c.WorkerId,
    postgresql_where=jobs_dlq.c.FailureReason == 2,
    sqlite_where=jobs_dlq.c.FailureReason == 2,
    mssql_where=jobs_dlq.c.FailureReason == 2,
)

queues = Table(
    "Queues",
    metadata,
    Column("Name", Key(limits.MAX_QUEUE_LEN), primary_key=True),
    Column("IsPaused", Flag, nullable=False, server_default=false()),
    Column("IsActive", Flag, nullable=False, server_default=true()),
    Column("ZombieTimeoutSeconds", Integer),
    Column("MaxWorkers", Integer),
    Column("LastUpdatedUtc", UtcTime, nullable=False),
)

stats_summary = Table(
    "StatsSummary",
    metadata,
    Column("Queue", Key(limits.MAX_QUEUE_LEN), primary_key=True),
    Column("SucceededTotal", BigInteger, nullable=False, server_default=text("0")),
    Column("FailedTotal", BigInteger, nullable=False, server_default=text("0")),
    Column("RetriedTotal", BigInteger, nullable=False, server_default=text("0")),
    Column("LastActivityUtc", UtcTime),
)

schema_migrations = Table(
    "SchemaMigrations",
    metadata,
    Column("Version", Integer, primary_key=True, autoincrement=False),
    Column("Name", String(200), nullable=False),
    Column("AppliedAtUtc", UtcTime, nullable=False),
)

audit_log = Table(
    "AuditLog",
    metadata,
    Column("Id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("AtUtc", UtcTime, nullable=False),
    Column("Actor", Unicode(limits.MAX_ACTOR_LEN), nullable=False),
    Column("Role", String(20), nullable=False),
    Column("Action", String(50), nullable=False),
    Column("JobIds", LongText),
    Column("JobCount", Integer, nullable=False, server_default=text("0")),
    Column("Details", LongText),
    info={SEQUENTIAL_KEY: True},
)
Index("IX_AuditLog_AtUtc", audit_log.c.AtUtc, mssql_sequential_key=True)
Index("IX_AuditLog_Actor", audit_log.c.Actor, audit_log.c.AtUtc)

# The event feed (docs/live-events.md): what the Deck should hear of, from every process, written in
# the transaction of the change it describes (a sweep's rescue, a batch of dead-letters, an
# operator action), never one row per successful job. Readers follow it by Id (the cursor);
# Origin names the writing process's storage, so its own readers skip what their bus already
# carried. Bounded by Events.Retention and Events.MaxRows (the sweep purges it in batches).
event_feed = Table(
    "EventFeed",
    metadata,
    Column("Id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("AtUtc", UtcTime, nullable=False),
    Column("Kind", String(50), nullable=False),
    Column("Origin", String(64), nullable=False),
    Column("Data", LongText),
    info={SEQUENTIAL_KEY: True},
    # Ids never reused, even after a purge emptied the table: a follower's cursor stays valid.
    sqlite_autoincrement=True,
)
# The age purge's read (the cursor's is the primary key).
Index("IX_EventFeed_AtUtc", event_feed.c.AtUtc)

# Recurring jobs (docs/schedules.md). Code declares them and upserts its rows at start-up; a row
# whose schedule left the code is marked orphaned and fires no more. NextDueUtc is the next slot;
# the firing transaction locks the row, enqueues that slot's job and moves NextDueUtc on, together.
schedules = Table(
    "Schedules",
    metadata,
    Column("Name", Key(limits.MAX_SCHEDULE_NAME_LEN), primary_key=True),
    Column("JobType", Key(limits.MAX_TYPE_LEN), nullable=False),
    Column("Queue", Key(limits.MAX_QUEUE_LEN), nullable=False),
    Column("Payload", LongText, nullable=False),
    Column("Priority", Integer, nullable=False, server_default=text("10")),
    Column("Cron", String(limits.MAX_CRON_LEN), nullable=False),
    Column("TimeZone", String(limits.MAX_TIME_ZONE_LEN), nullable=False),
    Column("MissedPolicy", String(10), nullable=False),
    Column("MissedMax", Integer, nullable=False),
    Column("NextDueUtc", UtcTime, nullable=False),
    Column("LastSlotUtc", UtcTime),
    Column("LastFiredUtc", UtcTime),
    Column("LastJobId", IdKey(limits.MAX_JOB_ID_LEN)),
    Column("IsPaused", Flag, nullable=False, server_default=false()),
    Column("IsOrphaned", Flag, nullable=False, server_default=false()),
    Column("CreatedAtUtc", UtcTime, nullable=False),
    Column("CreatedBy", Unicode(limits.MAX_ACTOR_LEN)),
    Column("LastUpdatedUtc", UtcTime, nullable=False),
    Column("LastModifiedBy", Unicode(limits.MAX_ACTOR_LEN)),
)
# The firing processes' one read: which rows are due.
Index("IX_Schedules_NextDue", schedules.c.NextDueUtc)

# One row per job type whose breaker has counted a failure (Execution.CircuitBreaker): the state
# every worker reads in its claim. State: 0 closed, 1 open, 2 half-open (chokaq.domain.breakers).
circuit_breakers = Table(
    "CircuitBreakers",
    metadata,
    Column("JobType", Key(limits.MAX_TYPE_LEN), primary_key=True),
    Column("State", Integer, nullable=False, server_default=text("0")),
    Column("FailureCount", Integer, nullable=False, server_default=text("0")),
    Column("WindowStartUtc", UtcTime),
    Column("OpenedAtUtc", UtcTime),
    Column("OpenUntilUtc", UtcTime),
    Column("ProbesInFlight", Integer, nullable=False, server_default=text("0")),
    Column("UpdatedBy", Unicode(limits.MAX_ACTOR_LEN)),
    Column("LastUpdatedUtc", UtcTime, nullable=False),
)
# Worker presence (docs/workers.md): each worker process upserts its row at start and on its
# heartbeat tick, marks it stopped on a clean exit; the sweep marks a silent one lost and prunes
# old stopped and lost rows. WorkerId is the id its jobs carry in JobsHot.WorkerId / JobsDLQ.WorkerId.
workers = Table(
    "Workers",
    metadata,
    Column("WorkerId", Key(limits.MAX_WORKER_ID_LEN), primary_key=True),
    Column("Host", Unicode(limits.MAX_HOST_LEN), nullable=False),
    Column("Pid", Integer, nullable=False),
    Column("Version", String(limits.MAX_VERSION_LEN), nullable=False),
    # The queues it serves as a JSON list; NULL: every queue.
    Column("Queues", LongText),
    Column("Concurrency", Integer, nullable=False),
    Column("Running", Integer, nullable=False, server_default=text("0")),
    Column("StartedAtUtc", UtcTime, nullable=False),
    Column("LastSeenUtc", UtcTime, nullable=False),
    # live, stopped (a clean exit) or lost (silent past Recovery.ProcessingZombieTimeout).
    Column("State", String(10), nullable=False),
    Column("StoppedAtUtc", UtcTime),
)
# The sweep's two reads: live rows gone silent, and old stopped or lost rows to prune.
Index("IX_Workers_StateLastSeen", workers.c.State, workers.c.LastSeenUtc)
# A job's logs and progress: written by the worker, read by a job's own read, never by a claim or
# a list (they can be the largest columns, and neither needs them).
NOTES_COLUMNS = frozenset({"Logs", "Progress"})
hot_record_columns = tuple(col for col in jobs_hot.c if col.name not in NOTES_COLUMNS)
# The step journal (docs/steps.md): one row per step a job's handler began, keyed by the job's id
# so it survives the job's moves (archive, DLQ, resurrect) untouched. State 0 started, 1 done; a
# row is written before the step's body runs and updated before the handler goes on, each write
# fenced by the worker and attempt holding the job.
job_steps = Table(
    "JobSteps",
    metadata,
    Column("JobId", IdKey(limits.MAX_JOB_ID_LEN), nullable=False),
    Column("Name", Key(MAX_STEP_NAME_LEN), nullable=False),
    Column("Attempt", Integer, nullable=False),
    Column("WorkerId", Key(limits.MAX_WORKER_ID_LEN), nullable=False),
    Column("State", Integer, nullable=False),
    Column("StartedAtUtc", UtcTime, nullable=False),
    Column("DoneAtUtc", UtcTime),
    Column("Result", LongText),
    PrimaryKeyConstraint("JobId", "Name", name="PK_JobSteps"),
)
