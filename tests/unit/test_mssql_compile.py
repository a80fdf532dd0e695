"""Every statement chokaq runs, compiled for SQL Server.

There is no SQL Server here, so the scenario runs on SQLite while each statement object is
captured and compiled again with the mssql+pyodbc dialect, initialised as for SQL Server 2022
(an uninitialised dialect pages with ROW_NUMBER() and types text as NTEXT: not what production
sends). The statements only SQL Server gets (claims, fenced moves, move batches) are compiled from
their builders here, and checked as sent in tests/driver. Assertions check what matters on SQL
Server: lock hints on claims, OUTPUT for moves, SQL Server's clock, no foreign syntax.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column, MetaData, String, Table, bindparam, event, select, true
from sqlalchemy.sql import ClauseElement

from chokaq.domain.models import EnqueueRequest, Lease
from chokaq.domain.states import FailureReason, Location
from chokaq.storage import Storage
from chokaq.storage.admin import Actor, AdminStore, JobEdit, JobFilter
from chokaq.storage.dialects.sqlserver_shapes import MoveBatch, lease_rowset
from chokaq.storage.migrations import render_script
from chokaq.storage.sqlfuncs import ListParam, in_list
from chokaq.storage.statements import (
    complete_statements,
    heartbeat_statement,
    mssql_claim_statement,
    start_statement,
    zombie_statements,
)
from chokaq.storage.store import Completion
from tests.driver.recording import sql_server_2022_engine

# Named parameters (":claim_worker") keep the assertions readable; production's are "?".
DIALECT = sql_server_2022_engine(paramstyle="named").dialect


def compile_mssql(stmt: ClauseElement, keys: list[str] | None = None) -> str:
    return str(stmt.compile(dialect=DIALECT, column_keys=keys))


@pytest.fixture
def captured(tmp_path: Path) -> Iterator[tuple[Storage, list[str]]]:
    storage = Storage(f"sqlite:///{tmp_path / 'c.db'}")
    storage.upgrade()
    seen: list[str] = []

    @event.listens_for(storage.engine, "before_execute")
    def capture(conn: Any, clauseelement: Any, multiparams: Any, params: Any, options: Any) -> None:
        if not isinstance(clauseelement, ClauseElement):
            return
        rows = multiparams[0] if multiparams and isinstance(multiparams[0], list) else multiparams or [params]
        keys = list(rows[0].keys()) if rows and isinstance(rows[0], dict) and rows[0] else None
        sql = compile_mssql(clauseelement, keys)
        # Savepoint clauses are rendered by the dialect's own hooks at run time, not from this text.
        if "SAVEPOINT" not in sql and not sql.startswith("SAVE TRANSACTION"):
            seen.append(sql)

    yield storage, seen
    storage.close()


def run_everything(s: Storage) -> None:
    admin = AdminStore(s)
    me = Actor("ops@example.com", "admin")
    s.update_queue("limited", max_workers=2)
    s.update_queue("paused", paused=True)
    s.enqueue(EnqueueRequest(type="a", idempotency_key="k"))
    s.enqueue(EnqueueRequest(type="a", idempotency_key="k"))
    s.enqueue(EnqueueRequest(type="a", delay_seconds=0.5))
    ids = s.enqueue_many([EnqueueRequest(type="a") for _ in range(6)] + [EnqueueRequest(type="b", queue="limited")])
    jobs = s.fetch("w", 10)
    s.fetch("w", 2, start=True, zombie_retry_types={"a"}, skip=[ids[0]])
    started = s.start("w", jobs, {"a"}).started
    leases = [j.lease for j in started]
    s.heartbeat("w", leases)
    s.complete("w", [Completion(leases[0], 3)])
    s.fail(leases[1], FailureReason.FATAL_ERROR, "boom")
    s.retry(leases[2], 1.5)
    s.reschedule("w", [leases[3]])
    s.release("w", [Lease("nope", "w", 0)])
    s.sweep(fetched_timeout=600, zombie_timeout=600, max_attempts=3)
    s.queue_stats()
    s.list_queues()
    s.get_job(ids[0])
    ids = s.enqueue_many([EnqueueRequest(type="c", queue="paused") for _ in range(6)])
    admin.cancel(ids[4:6], me)
    admin.list_jobs(
        Location.DLQ,
        JobFilter(
            search="x",
            failure_reason=FailureReason.CANCELLED,
            queue="default",
            from_utc=datetime(2020, 1, 1),
            to_utc=datetime(2100, 1, 1),
        ),
    )
    admin.list_jobs(Location.HOT, JobFilter(tag="t", type="a"), sort="priority", page=2, page_size=5)
    admin.list_jobs(Location.ARCHIVE, JobFilter())
    admin.edit_dlq(ids[4], JobEdit(payload='{"fixed": true}', tags="t"), me)
    admin.resurrect(ids[4], me, JobEdit(priority=30))
    admin.resurrect_many(me, f=JobFilter(queue="default"), max_jobs=10, dry_run=True)
    admin.resurrect_many(me, ids=[ids[5]])
    fatal = JobFilter(failure_reason=FailureReason.FATAL_ERROR)
    preview = admin.purge_dlq(me, f=fatal, dry_run=True)
    admin.purge_dlq(me, f=fatal, expected_count=preview.matched, snapshot=preview.snapshot)
    admin.edit_pending(ids[4], JobEdit(tags="x"), me)
    admin.purge_archive(datetime.now() + timedelta(days=1), me, batch_size=1)
    admin.list_audit(job_id=ids[4], actor="ops@example.com")
    admin.top_errors()
    admin.recent_rates()
    admin.queue_changed("q2", me, {"paused": True}, paused=True)


def test_every_statement_compiles_for_sql_server(captured: tuple[Storage, list[str]]) -> None:
    storage, seen = captured
    run_everything(storage)
    assert len(seen) > 60
    for sql in seen:
        assert "now()" not in sql.lower()
        assert "clock_timestamp" not in sql
        assert "strftime" not in sql
        assert "CURRENT_TIMESTAMP" not in sql, sql
        assert "RETURNING" not in sql, sql
        assert " LIMIT " not in sql, sql
        assert "FOR UPDATE" not in sql, sql
        assert "SKIP LOCKED" not in sql, sql
        assert "ILIKE" not in sql.upper().replace("LIKE LOWER", ""), sql
        # Filtered indexes are only used for literal predicates, never for parameters.
        assert "[Status] = :" not in sql and "[Status] IN (__[POSTCOMPILE" not in sql, sql
        # SQL Server 2022: OFFSET/FETCH paging and NVARCHAR(max), not the pre-2012 fallbacks.
        assert "ROW_NUMBER()" not in sql and "mssql_rn" not in sql and "NTEXT" not in sql, sql
    paged = [s for s in seen if "OFFSET :" in s]
    assert paged and all("ROWS\n FETCH FIRST :" in s for s in paged)


def test_claim_is_an_updatable_cte_with_the_lock_hints() -> None:
    claim = compile_mssql(mssql_claim_statement(False, False, 5))
    # TOP takes the limit as a literal (rendered at execution), not a parameter.
    assert re.match(r"WITH pick AS \n\(SELECT TOP 5 j\.\[Id\]\nFROM \(SELECT TOP __\[POSTCOMPILE_\w+\] ", claim), claim
    assert "FROM chokaq.[JobsHot] WITH (INDEX([IX_JobsHot_Fetch]), UPDLOCK, READPAST, ROWLOCK)" in claim
    assert "FROM chokaq.[JobsHot] WITH (UPDLOCK, READPAST, ROWLOCK)" in claim
    assert "\nUPDATE c SET [Status]=1, [WorkerId]=:claim_worker, [LastUpdatedUtc]=SYSUTCDATETIME()" in claim
    assert "OUTPUT inserted.[Id]" in claim
    assert "ORDER BY chokaq.[JobsHot].[Priority] DESC, chokaq.[JobsHot].[ScheduledAtUtc], " in claim
    assert "OPENJSON(CAST(:claim_queues AS NVARCHAR(max)))" in compile_mssql(mssql_claim_statement(True, True, 5))


def test_a_claim_that_starts_is_the_same_locked_claim() -> None:
    claim = compile_mssql(mssql_claim_statement(False, False, 5, True, True))
    assert "FROM chokaq.[JobsHot] WITH (UPDLOCK, READPAST, ROWLOCK)" in claim
    assert "NOT chokaq.[JobsHot].[Id] IN (SELECT CAST([value] AS VARCHAR(50)) " in claim
    assert "FROM OPENJSON(CAST(:claim_skip AS NVARCHAR(max))))" in claim
    assert "[AttemptCount]=c.[AttemptCount] + 1" in claim
    assert "[StartedAtUtc]=SYSUTCDATETIME(), [HeartbeatUtc]=SYSUTCDATETIME()" in claim
    assert "[ZombieRetry]=CASE WHEN c.[Type] IN (SELECT CAST([value] AS NVARCHAR(255))" in claim
    assert "OUTPUT inserted.[Id]" in claim and "inserted.[AttemptCount]" in claim


def test_worker_moves_are_fenced_by_worker_and_one_lease_rowset() -> None:
    lease = (
        "(SELECT [Id] COLLATE Latin1_General_100_BIN2 AS [Id], [Attempt] "
        "FROM OPENJSON(CAST(:fence_leases AS NVARCHAR(max))) "
        "WITH ([Id] VARCHAR(50) '$[0]', [Attempt] INT '$[1]')) AS lease"
    )
    fence = (
        "chokaq.[JobsHot].[Id] = lease.[Id] AND chokaq.[JobsHot].[AttemptCount] = lease.[Attempt] "
        "AND chokaq.[JobsHot].[Status] + 0 = {status} AND chokaq.[JobsHot].[WorkerId] = :fence_worker"
    )
    heartbeat = compile_mssql(heartbeat_statement(0))
    start = compile_mssql(start_statement(0, False))
    move = compile_mssql(complete_statements(0).batch)
    # A completion's rowset carries each job's duration as a third column.
    with_durations = lease.replace("[Attempt] FROM", "[Attempt], [DurationMs] FROM").replace(
        "INT '$[1]')", "INT '$[1]', [DurationMs] BIGINT '$[2]')"
    )
    for sql, status, rowset in ((heartbeat, 2, lease), (start, 1, lease), (move, 2, with_durations)):
        # By primary key: "Status + 0" keeps the planner off the whole filtered index.
        assert rowset in sql and fence.format(status=status) in sql, sql
        assert " OR " not in sql, sql
    assert heartbeat.startswith("UPDATE chokaq.[JobsHot] SET [HeartbeatUtc]=SYSUTCDATETIME() OUTPUT inserted.[Id] ")


def test_worker_moves_copy_under_a_row_lock() -> None:
    move = compile_mssql(complete_statements(0).batch)
    # Without UPDLOCK another session could move the row between the copy and the delete.
    assert (
        "\nFROM chokaq.[JobsHot] WITH (UPDLOCK, ROWLOCK), "
        "(SELECT [Id] COLLATE Latin1_General_100_BIN2 AS [Id], [Attempt]" in move
    )
    assert "INSERT INTO chokaq.[JobsArchive] (" in move and "OUTPUT inserted.[Id], inserted.[Queue] INTO @moved" in move
    # The duration is a column of the lease rowset, not a JSON lookup per row.
    assert "lease.[DurationMs]" in move and "JSON_VALUE" not in move
    assert "DELETE h FROM chokaq.[JobsHot] AS h JOIN @moved AS m ON m.[Id] = h.[Id];" in move


def test_time_arithmetic_is_sql_servers(captured: tuple[Storage, list[str]]) -> None:
    storage, seen = captured
    run_everything(storage)
    sweep = [s for s in seen if "coalesce(chokaq.[JobsHot].[HeartbeatUtc], chokaq.[JobsHot].[LastUpdatedUtc]) <" in s]
    assert sweep
    assert "DATEADD(SECOND" in sweep[0] and "SYSUTCDATETIME()" in sweep[0]
    assert "[ZombieTimeoutSeconds]" in sweep[0]
    # Seconds from Python arrive typed, never as a bare operand of FLOOR or "-".
    assert re.search(r"CAST\(FLOOR\(-coalesce\(.*, CAST\(:param_\d+ AS FLOAT\)\)\) AS INT\)", sweep[0], re.S)
    zombies = compile_mssql(zombie_statements(true()).batch)
    assert "'Zombie detected: heartbeat expired (last heartbeat ' + coalesce(CAST(" in zombies


def test_moves_delete_with_output_deleted(captured: tuple[Storage, list[str]]) -> None:
    storage, seen = captured
    run_everything(storage)
    deletes = [s for s in seen if s.startswith("DELETE FROM chokaq.[JobsHot]")]
    assert deletes
    for d in deletes:
        assert "OUTPUT deleted.[Id]" in d
    resurrects = [s for s in seen if s.startswith("DELETE FROM chokaq.[JobsDLQ]") and "deleted.[Payload]" in s]
    assert resurrects, "resurrect must move the DLQ row with OUTPUT"


def test_queue_lock_for_max_workers(captured: tuple[Storage, list[str]]) -> None:
    storage, seen = captured
    storage.update_queue("limited", max_workers=1)
    storage.enqueue(EnqueueRequest(type="a", queue="limited"))
    storage.fetch("w", 5)
    locks = [s for s in seen if s.startswith("SELECT") and "[Queues]" in s and "WITH (UPDLOCK, ROWLOCK)" in s]
    assert locks


def test_ddl_script_for_sql_server() -> None:
    ddl = render_script("mssql")
    assert "IF SCHEMA_ID('chokaq') IS NULL" in ddl
    assert "DATETIME2(7)" in ddl and "NVARCHAR(max)" in ddl
    assert "CREATE UNIQUE INDEX [UX_JobsHot_IdempotencyKey]" in ddl
    assert "WHERE [IdempotencyKey] IS NOT NULL" in ddl
    assert "WHERE [Status] = 0" in ddl and "WHERE [Status] = 2" in ddl
    assert "\nGO\n" in ddl


def test_casts_and_rowsets_carry_a_key_collation_outside_the_cast() -> None:
    """CAST(... AS VARCHAR(50) COLLATE x) and OPENJSON ... WITH (col VARCHAR(50) COLLATE x) are not
    T-SQL, but a CAST's result and OPENJSON's columns carry the database default collation as
    implicit labels: against a BIN2 key column that is Msg 468. So COLLATE follows the CAST, and
    the lease rowset's select list; @moved declares it."""
    binary = String(50, collation="Latin1_General_100_BIN2")
    t = Table("T", MetaData(), Column("Id", binary, primary_key=True), Column("Queue", binary))
    lease = lease_rowset(t.c.Id)
    ids = in_list(t.c.Id, bindparam("ids", type_=ListParam(binary)))
    found = compile_mssql(select(t.c.Id).where(t.c.Id == lease.c.Id, ids))
    assert "WITH ([Id] VARCHAR(50) '$[0]'" in found
    assert "SELECT [Id] COLLATE Latin1_General_100_BIN2 AS [Id], [Attempt] FROM OPENJSON(" in found
    assert "CAST([value] AS VARCHAR(50)) COLLATE Latin1_General_100_BIN2 FROM OPENJSON(" in found
    assert "AS VARCHAR(50) COLLATE" not in found and "'$[0]' COLLATE" not in found
    plain = Table("P", MetaData(), Column("Id", String(50), primary_key=True))
    plain_ids = bindparam("ids", type_=ListParam(String(50)))
    unkeyed = compile_mssql(select(plain.c.Id).where(in_list(plain.c.Id, plain_ids)))
    assert "COLLATE" not in unkeyed
    batch = compile_mssql(MoveBatch(t, t, ["Id"], select(t.c.Id), "SucceededTotal"))
    assert "DECLARE @moved TABLE ([Id] VARCHAR(50) COLLATE Latin1_General_100_BIN2 PRIMARY KEY" in batch


def test_the_real_tables_key_collation_reaches_the_table_variable() -> None:
    """The schema's key types carry their collation only in a column definition; @moved is one, or
    joining it with JobsHot's BIN2 keys fails (Msg 468, collation conflict)."""
    from chokaq.storage.schema import jobs_archive, jobs_hot

    batch = compile_mssql(MoveBatch(jobs_hot, jobs_archive, ["Id"], select(jobs_hot.c.Id), "SucceededTotal"))
    assert (
        "DECLARE @moved TABLE ([Id] VARCHAR(50) COLLATE Latin1_General_100_BIN2 PRIMARY KEY, "
        "[Queue] NVARCHAR(255) COLLATE Latin1_General_100_BIN2)" in batch
    ), batch


def test_history_statements_compile_for_sql_server() -> None:
    # The Deck's history charts: bucket by whole seconds (DATEDIFF_BIG), wait in ms, grouped by
    # the derived table's columns (SQL Server refuses GROUP BY an alias, and repeated "?" in a
    # GROUP BY expression would not match the SELECT list's).
    from chokaq.storage.history import history_statements

    for queue in (None, "q"):
        archive, dlq = history_statements(queue)
        a_sql, d_sql = compile_mssql(archive), compile_mssql(dlq)
        assert (
            "DATEDIFF_BIG(SECOND, CAST(:h_start AS DATETIME2), chokaq.[JobsArchive].[FinishedAtUtc]) "
            "/ CAST(:h_size AS INTEGER) AS bucket" in a_sql
        )
        wait = (
            "DATEDIFF_BIG(MILLISECOND, coalesce(chokaq.[JobsArchive].[ScheduledAtUtc], "
            "chokaq.[JobsArchive].[CreatedAtUtc]), chokaq.[JobsArchive].[StartedAtUtc])"
        )
        assert wait in a_sql
        # The wait's histogram bin: one LOG10 per row, five bins per decade, capped.
        assert "ELSE CAST(FLOOR(LOG10(" in a_sql and ") * 5) AS INT) + 1 END" in a_sql and "THEN 41" in a_sql
        assert (
            "DATEDIFF_BIG(SECOND, CAST(:h_start AS DATETIME2), chokaq.[JobsDLQ].[FailedAtUtc]) "
            "/ CAST(:h_size AS INTEGER) AS bucket" in d_sql
        )
        assert a_sql.rstrip().endswith("AS h GROUP BY h.bucket, h.wait_bin")
        assert d_sql.rstrip().endswith("AS h GROUP BY h.bucket, h.reason")
        # Sargable range on the indexed time column; no function wraps it in the WHERE clause.
        assert "[FinishedAtUtc] >= :h_start AND chokaq.[JobsArchive].[FinishedAtUtc] < :h_end" in a_sql
        assert "[FailedAtUtc] >= :h_start AND chokaq.[JobsDLQ].[FailedAtUtc] < :h_end" in d_sql
        assert ("[Queue] = :h_queue" in a_sql) is (queue is not None)
        for sql in (a_sql, d_sql):
            assert "strftime" not in sql and "EXTRACT" not in sql and "julianday" not in sql and "LIMIT" not in sql


def test_a_list_parameter_prints_as_json_for_a_dialect_chokaq_has_no_profile_for() -> None:
    # str(statement) and literal_binds use SQLAlchemy's default dialect: the list is shown as the
    # JSON text every database but PostgreSQL receives, not refused.
    stmt = select(bindparam("ids", ["a", "b"], type_=ListParam(String())))
    assert '\'["a", "b"]\'' in str(stmt.compile(compile_kwargs={"literal_binds": True}))
