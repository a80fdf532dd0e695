"""SQL Server schema: column types and collations, sequential clustered keys, migration 3 and the
server requirements `chokaq db upgrade` checks, compiled and checked at the DBAPI boundary."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import cast, column, select
from sqlalchemy.dialects import mssql
from sqlalchemy.schema import CreateTable

from chokaq.domain.errors import ConfigurationError
from chokaq.storage import Storage
from chokaq.storage.migrations import MIGRATIONS, render_script
from chokaq.storage.schema import audit_log, jobs_archive, jobs_dlq, jobs_hot, metadata, queues, stats_summary

from .mssql_fake import FakeServer

pyodbc = pytest.importorskip("pyodbc", reason="pyodbc needs libodbc (Debian: unixodbc)")

URL = "mssql+pyodbc://sa:Pw_1@db/chokaq?driver=ODBC+Driver+18+for+SQL+Server"
BIN2 = "COLLATE Latin1_General_100_BIN2"
SEQ = "PRIMARY KEY CLUSTERED ([Id]) WITH (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)"


def ddl(table: Any, version: tuple[int, ...] | None = None) -> str:
    dialect = mssql.pyodbc.dialect()
    dialect.server_version_info = version
    return str(CreateTable(table).compile(dialect=dialect))


def column_line(sql: str, name: str) -> str:
    (line,) = [ln.strip().rstrip(",") for ln in sql.splitlines() if ln.strip().startswith(f"[{name}] ")]
    return line


@pytest.mark.parametrize("table", [jobs_hot, jobs_archive, jobs_dlq])
def test_job_tables_use_nvarchar_and_binary_keys(table: Any) -> None:
    sql = ddl(table)
    assert column_line(sql, "Id") == f"[Id] VARCHAR(50) {BIN2} NOT NULL"
    assert column_line(sql, "Queue") == f"[Queue] NVARCHAR(255) {BIN2} NOT NULL"
    assert column_line(sql, "Type") == f"[Type] NVARCHAR(255) {BIN2} NOT NULL"
    assert column_line(sql, "WorkerId") == f"[WorkerId] NVARCHAR(100) {BIN2} NULL"
    # User text that is not a key: Unicode, under the database's own collation.
    assert column_line(sql, "Tags") == "[Tags] NVARCHAR(1000) NULL"
    assert column_line(sql, "CreatedBy") == "[CreatedBy] NVARCHAR(100) NULL"
    assert column_line(sql, "LastModifiedBy") == "[LastModifiedBy] NVARCHAR(100) NULL"
    assert column_line(sql, "Payload") == "[Payload] NVARCHAR(max) NOT NULL"
    assert not re.search(r"\bVARCHAR\((?!50\) COLLATE)", sql.replace("NVARCHAR", "")), sql
    assert SEQ in sql


def test_key_and_name_columns_elsewhere() -> None:
    assert column_line(ddl(jobs_hot), "IdempotencyKey") == f"[IdempotencyKey] NVARCHAR(255) {BIN2} NULL"
    assert column_line(ddl(queues), "Name") == f"[Name] NVARCHAR(255) {BIN2} NOT NULL"
    assert column_line(ddl(stats_summary), "Queue") == f"[Queue] NVARCHAR(255) {BIN2} NOT NULL"
    assert column_line(ddl(audit_log), "Actor") == "[Actor] NVARCHAR(100) NOT NULL"
    # Keyed by name, not appended to: no sequential-key option.
    assert "OPTIMIZE_FOR_SEQUENTIAL_KEY" not in ddl(queues) + ddl(stats_summary)
    assert "PRIMARY KEY CLUSTERED ([Id]) WITH (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)" in ddl(audit_log)


def test_sequential_key_only_where_the_server_has_it() -> None:
    assert SEQ in ddl(jobs_hot, (16, 0, 4135))  # SQL Server 2022
    assert SEQ in ddl(jobs_hot, (15, 0, 2000))  # 2019
    assert SEQ in ddl(jobs_hot, (12, 0, 2000))  # Azure SQL reports 12.x
    on_2017 = ddl(jobs_hot, (14, 0, 3456))
    assert "PRIMARY KEY CLUSTERED ([Id])" in on_2017 and "OPTIMIZE_FOR_SEQUENTIAL_KEY" not in on_2017


def test_casts_to_a_key_type_carry_no_collate() -> None:
    # CAST(x AS NVARCHAR(255) COLLATE ...) is not T-SQL; the statements cast JSON values this way.
    sql = str(select(cast(column("value"), jobs_hot.c.Queue.type)).compile(dialect=mssql.pyodbc.dialect()))
    assert "CAST(value AS NVARCHAR(255))" in sql and "COLLATE" not in sql


def test_the_script_shows_the_types_and_keys() -> None:
    script = render_script("mssql")
    assert f"[Queue] NVARCHAR(255) {BIN2} NOT NULL" in script
    assert f"[IdempotencyKey] NVARCHAR(255) {BIN2} NULL" in script
    # The five appended-to clustered keys (EventFeed's too), and the five secondary indexes whose first key only grows.
    assert script.count("WITH (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)") == 10
    assert "VARCHAR(255)" not in script.replace("NVARCHAR(255)", "")


# --- at the driver ---------------------------------------------------------------------------------


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    srv = FakeServer()
    monkeypatch.setattr(pyodbc, "connect", srv.connect)
    srv.answer(r"SYSUTCDATETIME", [(datetime(2026, 1, 1),)])
    srv.answer(r"sp_getapplock", [(0,)])
    return srv


def requirements(server: FakeServer, major: int, edition: int, level: int) -> None:
    server.answer(r"PARSENAME\(CAST\(SERVERPROPERTY\('ProductVersion'\)", [(major, edition, level, "chokaq")])


def test_upgrade_refuses_a_low_compatibility_level_naming_the_fix(server: FakeServer) -> None:
    requirements(server, 16, 3, 120)
    storage = Storage(URL)
    with pytest.raises(ConfigurationError) as err:
        storage.upgrade()
    message = str(err.value)
    assert "\n" not in message
    assert "compatibility level 120" in message and "130" in message
    assert "ALTER DATABASE [chokaq] SET COMPATIBILITY_LEVEL = 150" in message
    # Refused before anything was locked or created.
    assert not any("sp_getapplock" in s or "CREATE" in s for s in server.sql())
    storage.close()


def test_upgrade_refuses_sql_server_2016(server: FakeServer) -> None:
    requirements(server, 13, 3, 130)
    storage = Storage(URL)
    with pytest.raises(ConfigurationError, match=r"SQL Server 13\.x is too old: chokaq needs SQL Server 2017"):
        storage.upgrade()
    storage.close()


def test_cli_db_upgrade_exits_non_zero_with_one_line(server: FakeServer) -> None:
    from chokaq.cli.main import cli

    requirements(server, 16, 3, 110)
    result = CliRunner().invoke(cli, ["--db", URL, "db", "upgrade"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: database chokaq has compatibility level 110"), lines
    assert "COMPATIBILITY_LEVEL = 150" in lines[0]


def test_azure_sql_passes_and_a_new_database_gets_the_current_schema(server: FakeServer) -> None:
    requirements(server, 12, 5, 160)  # Azure SQL Database reports 12.x
    storage = Storage(URL)
    assert storage.upgrade() == [v for v, _, _ in MIGRATIONS]
    sql = server.sql()
    creates = [s for s in sql if s.startswith("\nCREATE TABLE chokaq.[JobsHot]")]
    assert creates and f"[Queue] NVARCHAR(255) {BIN2} NOT NULL" in creates[0] and SEQ in creates[0]
    # Nothing to convert in a database made from the current definitions.
    assert not any("ALTER COLUMN" in s for s in sql)
    storage.close()


OLD_COLUMNS = [
    # What migration 1 created before NVARCHAR and the binary collation (name, type, collation).
    ("Id", "varchar", "SQL_Latin1_General_CP1_CI_AS"),
    ("Queue", "varchar", "SQL_Latin1_General_CP1_CI_AS"),
    ("Type", "varchar", "SQL_Latin1_General_CP1_CI_AS"),
    ("Tags", "varchar", "SQL_Latin1_General_CP1_CI_AS"),
    ("IdempotencyKey", "varchar", "SQL_Latin1_General_CP1_CI_AS"),
    ("WorkerId", "varchar", "SQL_Latin1_General_CP1_CI_AS"),
    ("CreatedBy", "varchar", "SQL_Latin1_General_CP1_CI_AS"),
    ("LastModifiedBy", "varchar", "SQL_Latin1_General_CP1_CI_AS"),
    ("Name", "varchar", "SQL_Latin1_General_CP1_CI_AS"),
    ("Actor", "varchar", "SQL_Latin1_General_CP1_CI_AS"),
    ("Payload", "nvarchar", "SQL_Latin1_General_CP1_CI_AS"),
    ("Priority", "int", None),
]


def test_migration_3_converts_an_existing_database(server: FakeServer) -> None:
    from chokaq.storage.dialects.sqlserver_keys import upgrade_keys_and_text

    server.answer(r"FROM sys\.columns", OLD_COLUMNS)
    # (name, optimize_for_sequential_key): made before the option.
    server.answer(r"FROM sys\.key_constraints", [("PK__JobsHot__3214EC07A1B2C3D4", False)])
    # The tables' indexes as they are (every table is asked; each step rebuilds only its own).
    indexes = [(str(i.name),) for t in metadata.sorted_tables for i in t.indexes]
    server.answer(r"^SELECT i\.name FROM sys\.indexes AS i WHERE", indexes)
    # The pre-checks: no live worker, nothing foreign, no case variants, the log unlimited.
    server.answer(r"OBJECT_ID\(N'chokaq\.Workers'\)", [])
    server.answer(r"sys\.dm_db_log_space_usage", [(None, 1024)])
    storage = Storage(URL)
    with storage.engine.connect() as conn:
        upgrade_keys_and_text(conn)
    sql = [s.strip() for s in server.sql()]
    hot = [s for s in sql if "chokaq.[JobsHot]" in s]

    def at(fragment: str) -> int:
        (i,) = [n for n, s in enumerate(hot) if fragment in s]
        return i

    alter_queue = at(f"ALTER TABLE chokaq.[JobsHot] ALTER COLUMN [Queue] NVARCHAR(255) {BIN2} NOT NULL")
    alter_id = at(f"ALTER TABLE chokaq.[JobsHot] ALTER COLUMN [Id] VARCHAR(50) {BIN2} NOT NULL")
    at("ALTER TABLE chokaq.[JobsHot] ALTER COLUMN [Tags] NVARCHAR(1000) NULL")
    at(f"ALTER TABLE chokaq.[JobsHot] ALTER COLUMN [IdempotencyKey] NVARCHAR(255) {BIN2} NULL")
    # Indexes and the key are dropped before the columns change and created again after.
    assert at("DROP INDEX IF EXISTS [IX_JobsHot_Fetch] ON chokaq.[JobsHot]") < alter_queue
    assert at("DROP CONSTRAINT [PK__JobsHot__3214EC07A1B2C3D4]") < alter_id
    # The clustered key is rebuilt, so every index goes first, also one over unchanged columns.
    assert at("DROP INDEX IF EXISTS [IX_JobsHot_FetchedRecovery] ON chokaq.[JobsHot]") < alter_id
    assert at(f"ALTER TABLE chokaq.[JobsHot] ADD {SEQ}") > alter_id
    assert at("CREATE INDEX [IX_JobsHot_Fetch] ON chokaq.[JobsHot]") > alter_queue
    assert at("CREATE UNIQUE INDEX [UX_JobsHot_IdempotencyKey]") > alter_queue
    # Columns that are right already are not touched.
    assert not any("[Payload]" in s or "[Priority]" in s for s in sql if "ALTER COLUMN" in s)
    # The audit log keeps its identity key; only the index over Actor is rebuilt, and the key gets
    # the sequential option in place.
    assert "ALTER TABLE chokaq.[AuditLog] ALTER COLUMN [Actor] NVARCHAR(100) NOT NULL" in sql
    assert "DROP INDEX IF EXISTS [IX_AuditLog_Actor] ON chokaq.[AuditLog]" in sql
    assert not any("DROP INDEX IF EXISTS [IX_AuditLog_AtUtc]" in s for s in sql)
    assert any(s.startswith("ALTER INDEX [PK__JobsHot__3214EC07A1B2C3D4] ON chokaq.[AuditLog] SET (") for s in sql)
    storage.close()
    # The shared definitions still create their keys inline afterwards.
    assert SEQ in ddl(jobs_hot)


def test_the_script_runs_under_sqlcmd_defaults() -> None:
    script = render_script("mssql")
    batches = [b.strip() for b in script.split("\nGO\n")]
    assert script.rstrip().endswith("\nGO")
    # ODBC sqlcmd starts with QUOTED_IDENTIFIER OFF; the filtered indexes need it ON (Msg 1934).
    first_filtered = next(i for i, b in enumerate(batches) if b.startswith("CREATE") and " WHERE " in b)
    settings = next(i for i, b in enumerate(batches) if "SET QUOTED_IDENTIFIER ON;" in b)
    assert settings < first_filtered
    assert "SET ANSI_NULLS ON;" in batches[settings]
    # One statement per batch: CREATE SCHEMA-like statements must begin their batch.
    assert all(b.count("CREATE TABLE") <= 1 and b.count("CREATE INDEX") <= 1 for b in batches)


def test_upgrade_lifts_the_command_timeout_and_restores_it(server: FakeServer) -> None:
    from chokaq.settings import StorageSettings

    requirements(server, 16, 3, 160)
    storage = Storage(URL, settings=StorageSettings(command_timeout=7, pool_size=1))
    storage.upgrade()
    (conn,) = server.connections
    during = [t for sql, t in zip(conn.statements, conn.timeouts, strict=True) if "CREATE TABLE" in sql]
    assert during and set(during) == {0}, "converting a large table must not be cut off at 7 s"
    lifted = conn.statements.index("SET LOCK_TIMEOUT -1")
    assert lifted < conn.statements.index(next(s for s in conn.statements if "sp_getapplock" in s))
    assert conn.statements[lifted + 1 :].count("SET LOCK_TIMEOUT 7000") == 1
    assert conn.timeout == 7  # back on the pooled connection
    storage.ping()
    assert conn.timeouts[-1] == 7
    storage.close()
