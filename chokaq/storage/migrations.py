"""Schema creation and upgrades, serialised by a database lock so concurrent bootstraps are safe.

The plain scripts under ``sql/`` are rendered from the same table definitions
(:func:`render_script`); a test keeps them identical.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Column, Connection, Engine, Index, Integer, MetaData, String, Table, insert, inspect, select
from sqlalchemy.schema import CreateIndex, CreateTable, DropIndex

from chokaq.storage.dialects import profile_of
from chokaq.storage.schema import (
    SCHEMA,
    circuit_breakers,
    event_feed,
    job_steps,
    jobs_archive,
    jobs_dlq,
    jobs_hot,
    metadata,
    reason_index,
    schedules,
    schema_migrations,
    workers,
    zombie_worker_index,
)
from chokaq.storage.sqlfuncs import utcnow


def _v1_initial(conn: Connection) -> None:
    # The current definitions: later steps must therefore tolerate finding their work done.
    metadata.create_all(conn, checkfirst=True)


def _v2_drop_worker_index(conn: Connection) -> None:
    # No query looked rows up by worker, yet every claim, start and heartbeat paid to maintain
    # it, and the planner preferred it to the primary key for the worker's own moves: each move
    # then read every row the worker held instead of the few it named.
    # Named on a detached copy of the table: an Index on jobs_hot itself would join the current
    # definitions, and step 1 would create it again.
    old = Table(jobs_hot.name, MetaData(schema=SCHEMA), Column("WorkerId", String), Column("Status", Integer))
    conn.execute(DropIndex(Index("IX_JobsHot_Worker", old.c.WorkerId, old.c.Status), if_exists=True))


def _v3_unicode_keys(conn: Connection) -> None:
    # SQL Server: NVARCHAR user text, binary-collation keys, sequential-key primary keys.
    # PostgreSQL and SQLite already store Unicode and compare text exactly.
    profile_of(conn.dialect).upgrade_keys_and_text(conn)


def _v4_archive_due_time(conn: Connection) -> None:
    # The history's queue wait is start minus due time; the archive kept only the enqueue time,
    # which counts a requested delay as waiting. A nullable column: older rows fall back.
    # Step 1 may just have created it from the current definitions, hence "if missing".
    profile_of(conn.dialect).add_column(conn, jobs_archive, jobs_archive.c.ScheduledAtUtc)


def _v5_schedules(conn: Connection) -> None:
    # Recurring jobs. A new table (with its index): step 1 may just have created it.
    schedules.create(conn, checkfirst=True)


def _v6_attempt_history(conn: Connection) -> None:
    # Each failed attempt's entry travels with the job: a nullable text column on the three job
    # tables (older jobs simply have no history). "If missing", as for step 4.
    profile = profile_of(conn.dialect)
    for table in (jobs_hot, jobs_archive, jobs_dlq):
        profile.add_column(conn, table, table.c.Attempts)


def _v8_circuit_breakers(conn: Connection) -> None:
    # A breaker per job type. A new table: step 1 may just have created it.
    circuit_breakers.create(conn, checkfirst=True)


def _v7_workers(conn: Connection) -> None:
    # Worker presence: a new table (with its index), and the DLQ's zombies findable by worker.
    # Step 1 may just have created both.
    workers.create(conn, checkfirst=True)
    zombie_worker_index.create(conn, checkfirst=True)


def _v9_job_logs(conn: Connection) -> None:
    # What a handler logged and how far it got travel with the job as its history does (step 6):
    # nullable columns on the three job tables, added if missing.
    profile = profile_of(conn.dialect)
    for table in (jobs_hot, jobs_archive, jobs_dlq):
        profile.add_column(conn, table, table.c.Logs)
        profile.add_column(conn, table, table.c.Progress)


def _v11_search_indexes(conn: Connection) -> None:
    # The DLQ search read every dead job (LIKE '%...%'): 2 s at 500,000. pg_trgm on PostgreSQL,
    # FTS5 trigram on SQLite, nothing on SQL Server (dialects/search_indexes.py). "If not exists":
    # a database made from the script already has them.
    profile_of(conn.dialect).create_search_indexes(conn)


def _v10_step_journal(conn: Connection) -> None:
    # The step journal (docs/steps.md): a new table keyed by job id. Step 1 may just have made it.
    job_steps.create(conn, checkfirst=True)


def _v12_event_feed(conn: Connection) -> None:
    # The event feed every process writes and every serving process reads (docs/live-events.md).
    # A new table with its index: step 1 may just have created it.
    event_feed.create(conn, checkfirst=True)


def _v13_index_options(conn: Connection) -> None:
    # SQL Server: the claim index includes Type (every claim reads it), the history's columns
    # ride in the archive and DLQ time indexes, and the ever-growing secondary keys get
    # OPTIMIZE_FOR_SEQUENTIAL_KEY (dialects/sqlserver_indexes.py). Checked against the catalogue
    # first, so a database made by step 1 is left alone. Nothing on PostgreSQL or SQLite.
    profile_of(conn.dialect).upgrade_indexes(conn)


def _v14_dlq_reason_index(conn: Connection) -> None:
    # The DLQ filtered by failure reason alone read every dead job for a rare reason (its page
    # walked IX_JobsDLQ_FailedAt, its count the table). Step 1 may just have made it.
    reason_index.create(conn, checkfirst=True)


MIGRATIONS: list[tuple[int, str, Callable[[Connection], None]]] = [
    (1, "initial", _v1_initial),
    (2, "drop IX_JobsHot_Worker", _v2_drop_worker_index),
    (3, "SQL Server: NVARCHAR text, binary-collation keys", _v3_unicode_keys),
    (4, "JobsArchive.ScheduledAtUtc (queue wait from the due time)", _v4_archive_due_time),
    (5, "Schedules (recurring jobs)", _v5_schedules),
    (6, "Attempts on JobsHot, JobsArchive and JobsDLQ (the attempt history)", _v6_attempt_history),
    (7, "Workers (worker presence), IX_JobsDLQ_ZombieWorker", _v7_workers),
    (8, "CircuitBreakers (a breaker per job type)", _v8_circuit_breakers),
    (9, "Logs and Progress on JobsHot, JobsArchive and JobsDLQ (job logs)", _v9_job_logs),
    (10, "JobSteps (the step journal)", _v10_step_journal),
    (11, "DLQ search indexes (pg_trgm on PostgreSQL, FTS5 trigram on SQLite)", _v11_search_indexes),
    (12, "EventFeed (live events from every process)", _v12_event_feed),
    (13, "SQL Server: included columns of the claim and history indexes, sequential-key options", _v13_index_options),
    (14, "IX_JobsDLQ_Reason (the DLQ filtered by failure reason)", _v14_dlq_reason_index),
]


def upgrade(engine: Engine) -> list[int]:
    """Apply pending migrations. Returns the versions applied by this call (empty if current)."""
    with engine.connect() as conn:
        profile = profile_of(conn.dialect)
        with profile.upgrading(conn):
            applied = _upgrade(conn)
            # Inside: a profile whose lock outlives a transaction releases it after this commit.
            conn.commit()
        conn.commit()
        return applied


def _upgrade(conn: Connection) -> list[int]:
    # Inside the caller's transaction; the lock is held until it commits (SQL Server's until the
    # upgrade ends: its migration 3 commits each table's step on its own).
    applied: list[int] = []
    profile = profile_of(conn.dialect)
    profile.migration_lock(conn)
    done: set[int] = set()
    if inspect(conn).has_table(schema_migrations.name, schema=profile.table_schema):
        done = {int(v) for v in conn.execute(select(schema_migrations.c.Version)).scalars()}
    for version, name, step in MIGRATIONS:
        if version in done:
            continue
        step(conn)
        conn.execute(insert(schema_migrations).values(Version=version, Name=name, AppliedAtUtc=utcnow()))
        applied.append(version)
    return applied


def current_version(engine: Engine) -> int | None:
    with engine.connect() as conn:
        if not inspect(conn).has_table(schema_migrations.name, schema=profile_of(conn.dialect).table_schema):
            return None
        value = conn.execute(select(schema_migrations.c.Version).order_by(schema_migrations.c.Version.desc())).first()
        return int(value[0]) if value else None


def render_script(dialect_name: str) -> str:
    """The schema at the latest version as a plain script a DBA can read and run on a new
    database. It records every version, so `chokaq db upgrade` afterwards has nothing to do."""
    profile = profile_of(dialect_name)
    dialect = profile.ddl_dialect()
    sep = profile.script_separator
    latest = max(version for version, _, _ in MIGRATIONS)
    parts: list[str] = [
        f"-- chokaq schema, version {latest}, for a new database. Generated by `chokaq db script`; do not edit\n"
        "-- by hand. `chokaq db upgrade` creates the same schema under a lock, and upgrades a database\n"
        "-- made by an earlier version of this script.",
        *profile.script_preamble(dialect),
    ]
    for table in metadata.sorted_tables:
        parts.append(str(CreateTable(table).compile(dialect=dialect)).strip())
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            parts.append(str(CreateIndex(index).compile(dialect=dialect)).strip())
    parts.extend(profile.search_script())
    table_name = f"{profile.quote(SCHEMA)}.{profile.quote(schema_migrations.name)}"
    columns = ", ".join(profile.quote(n) for n in ("Version", "Name", "AppliedAtUtc"))
    for version, name, _ in MIGRATIONS:
        parts.append(f"INSERT INTO {table_name} ({columns}) VALUES ({version}, '{name}', {profile.script_now})")
    return sep.join(parts) + sep.rstrip() + "\n"
