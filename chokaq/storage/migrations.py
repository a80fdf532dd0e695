"""Schema creation and upgrades, serialised by a database lock so concurrent bootstraps are safe.

The plain scripts under ``sql/`` are rendered from the same table definitions
(:func:`render_script`); a test keeps them identical.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    insert,
    inspect,
    select,
    text,
)
from sqlalchemy.dialects import mssql, postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.schema import CreateIndex, CreateSchema, CreateTable, DropIndex

from chokaq.storage.schema import SCHEMA, jobs_archive, jobs_hot, metadata, schema_migrations
from chokaq.storage.sqlfuncs import utcnow

LOCK_NAME = "chokaq.migrations"
# pg_advisory_xact_lock takes a bigint; any fixed number unique to chokaq works.
PG_LOCK_KEY = 0x43484F4B41510001


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
    # SQL Server only: NVARCHAR user text, binary-collation keys, sequential-key primary keys.
    # PostgreSQL and SQLite already store Unicode and compare text exactly.
    if conn.dialect.name == "mssql":
        from chokaq.storage.mssql_keys_migration import upgrade_keys_and_text

        upgrade_keys_and_text(conn)


def _v4_archive_due_time(conn: Connection) -> None:
    # The history's queue wait is start minus due time; the archive kept only the enqueue time,
    # which counts a requested delay as waiting. A nullable column: older rows fall back.
    # Step 1 may just have created it from the current definitions, hence "if missing".
    name = conn.dialect.name
    prep = conn.dialect.identifier_preparer
    column = jobs_archive.c.ScheduledAtUtc
    definition = f"{prep.quote(column.name)} {column.type.compile(conn.dialect)} NULL"
    if name == "sqlite":
        if column.name not in {c["name"] for c in inspect(conn).get_columns(jobs_archive.name)}:
            conn.execute(text(f"ALTER TABLE {prep.quote(jobs_archive.name)} ADD COLUMN {definition}"))
        return
    table = f"{prep.quote_schema(SCHEMA)}.{prep.quote(jobs_archive.name)}"
    if name == "mssql":
        conn.execute(
            text(
                f"IF COL_LENGTH('{SCHEMA}.{jobs_archive.name}', '{column.name}') IS NULL "
                f"ALTER TABLE {table} ADD {definition}"
            )
        )
    else:
        conn.execute(text(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {definition}"))


MIGRATIONS: list[tuple[int, str, Callable[[Connection], None]]] = [
    (1, "initial", _v1_initial),
    (2, "drop IX_JobsHot_Worker", _v2_drop_worker_index),
    (3, "SQL Server: NVARCHAR text, binary-collation keys", _v3_unicode_keys),
    (4, "JobsArchive.ScheduledAtUtc (queue wait from the due time)", _v4_archive_due_time),
]


def _lock(conn: Connection) -> None:
    name = conn.dialect.name
    if name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_LOCK_KEY})
        conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{SCHEMA}"'))
    elif name == "mssql":
        rc = conn.execute(
            text(
                "DECLARE @rc int; EXEC @rc = sp_getapplock @Resource = :r, @LockMode = 'Exclusive', "
                "@LockOwner = 'Transaction', @LockTimeout = 120000; SELECT @rc"
            ),
            {"r": LOCK_NAME},
        ).scalar()
        if rc is None or int(rc) < 0:
            raise RuntimeError(f"could not take the migration lock (sp_getapplock returned {rc})")
        conn.execute(text(f"IF SCHEMA_ID('{SCHEMA}') IS NULL EXEC('CREATE SCHEMA [{SCHEMA}]')"))
    # SQLite: the engine opens write transactions with BEGIN IMMEDIATE, which is the lock.


def upgrade(engine: Engine) -> list[int]:
    """Apply pending migrations. Returns the versions applied by this call (empty if current)."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Storage.StatementTimeout is for the worker's statements; a migration (or a wait for
            # another process's migration lock) may rightly take longer. LOCAL: back at commit.
            conn.exec_driver_sql("SET LOCAL statement_timeout = 0")
        if conn.dialect.name != "mssql":
            return _upgrade(conn)
        from chokaq.storage.engine import mssql_without_timeouts
        from chokaq.storage.mssql_requirements import check_sql_server

        check_sql_server(conn)
        with mssql_without_timeouts(conn):
            return _upgrade(conn)


def _upgrade(conn: Connection) -> list[int]:
    # Inside the caller's transaction; the lock is held until it commits.
    applied: list[int] = []
    _lock(conn)
    done: set[int] = set()
    if inspect(conn).has_table(schema_migrations.name, schema=None if conn.dialect.name == "sqlite" else SCHEMA):
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
        schema = None if conn.dialect.name == "sqlite" else SCHEMA
        if not inspect(conn).has_table(schema_migrations.name, schema=schema):
            return None
        value = conn.execute(select(schema_migrations.c.Version).order_by(schema_migrations.c.Version.desc())).first()
        return int(value[0]) if value else None


DIALECTS: dict[str, Callable[[], Dialect]] = {
    "postgresql": postgresql.psycopg.dialect,
    "mssql": mssql.pyodbc.dialect,
    "sqlite": sqlite.pysqlite.dialect,
}


def render_script(dialect_name: str) -> str:
    """The schema at the latest version as a plain script a DBA can read and run on a new
    database. It records every version, so `chokaq db upgrade` afterwards has nothing to do."""
    dialect = DIALECTS[dialect_name]()
    sep = "\nGO\n" if dialect_name == "mssql" else ";\n"
    latest = MIGRATIONS[-1][0]
    parts: list[str] = [
        f"-- chokaq schema, version {latest}, for a new database. Generated by `chokaq db script`; do not edit\n"
        "-- by hand. `chokaq db upgrade` creates the same schema under a lock, and upgrades a database\n"
        "-- made by an earlier version of this script."
    ]
    if dialect_name == "mssql":
        # ODBC sqlcmd starts with QUOTED_IDENTIFIER OFF, and filtered indexes refuse to be created
        # without these (Msg 1934). They hold for the session, so once at the top is enough.
        parts.append(
            "SET ANSI_NULLS ON;\nSET ANSI_PADDING ON;\nSET ANSI_WARNINGS ON;\nSET ARITHABORT ON;\n"
            "SET CONCAT_NULL_YIELDS_NULL ON;\nSET NUMERIC_ROUNDABORT OFF;\nSET QUOTED_IDENTIFIER ON;"
        )
        parts.append(f"IF SCHEMA_ID('{SCHEMA}') IS NULL EXEC('CREATE SCHEMA [{SCHEMA}]')")
    elif dialect_name == "postgresql":
        parts.append(str(CreateSchema(SCHEMA, if_not_exists=True).compile(dialect=dialect)).strip())
    for table in metadata.sorted_tables:
        parts.append(str(CreateTable(table).compile(dialect=dialect)).strip())
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            parts.append(str(CreateIndex(index).compile(dialect=dialect)).strip())
    now = {"mssql": "SYSUTCDATETIME()", "postgresql": "(now() AT TIME ZONE 'UTC')"}.get(
        dialect_name, "CURRENT_TIMESTAMP"
    )
    table_name = f"[{SCHEMA}].[SchemaMigrations]" if dialect_name == "mssql" else f'"{SCHEMA}"."SchemaMigrations"'
    names = ("Version", "Name", "AppliedAtUtc")
    columns = ", ".join(f"[{n}]" if dialect_name == "mssql" else f'"{n}"' for n in names)
    for version, name, _ in MIGRATIONS:
        parts.append(f"INSERT INTO {table_name} ({columns}) VALUES ({version}, '{name}', {now})")
    return sep.join(parts) + sep.rstrip() + "\n"
