"""Worker presence on SQL Server, as far as the driver: the upsert (MERGE WITH (HOLDLOCK)) a worker
sends at start and per tick, its stop, the sweep's lost marking and prune, the Workers page's
reads, and migration 7: statement text, parameter types and round trips."""

from __future__ import annotations

import datetime as dt

from chokaq.domain.workers import WorkerIdentity
from chokaq.storage import Storage, WorkerDirectory, WorkerPresence
from chokaq.storage.migrations import MIGRATIONS
from chokaq.storage.schema import workers
from tests.driver.recording import Recorder
from tests.driver.test_contract_captures import SQL_VARCHAR, SQL_WVARCHAR, one_transaction, size_of
from tests.driver.test_statements import assert_one_statement

ME = WorkerIdentity("воркер-1", "host-ü", 4242, "0.1.0", ("reports", "mail"), 8)
SEEN = dt.datetime(2026, 1, 1, 3, 0)


def test_a_tick_is_one_merge_with_holdlock_every_value_typed(mssql: Storage, recorder: Recorder) -> None:
    WorkerPresence(mssql, ME).record(3)
    call = assert_one_statement(recorder, "worker_presence")
    sql = call.sql
    # HOLDLOCK: two MERGEs of the same new key cannot both miss and both insert.
    assert sql.startswith("MERGE INTO chokaq.[Workers] WITH (HOLDLOCK) AS t\nUSING (SELECT ? AS [WorkerId], ")
    assert "ON t.[WorkerId] = s.[WorkerId]\nWHEN MATCHED THEN UPDATE SET [Host] = s.[Host]" in sql
    assert "[StartedAtUtc] = s." not in sql  # a tick keeps the start time
    assert "WHEN NOT MATCHED THEN INSERT ([WorkerId], [Host]," in sql and sql.endswith(");")
    assert "'live' AS [State], CAST(NULL AS DATETIME2(7)) AS [StoppedAtUtc]" in sql
    assert call.params == [("воркер-1", "host-ü", 4242, "0.1.0", '["reports", "mail"]', 8, 3)]
    assert size_of(call, "воркер-1") == SQL_WVARCHAR and size_of(call, "host-ü") == SQL_WVARCHAR
    assert size_of(call, '["reports", "mail"]') == SQL_WVARCHAR
    # Integers go typed by their Python value (SQLAlchemy names no ODBC type for them): never described.
    assert size_of(call, 4242) is float and size_of(call, 3) is float
    assert size_of(call, "0.1.0") == SQL_VARCHAR


def test_the_start_sets_the_start_time_and_every_queue_writes_null(mssql: Storage, recorder: Recorder) -> None:
    every = WorkerIdentity("w-all", "h", 1, "0.1.0", None, 10)
    WorkerPresence(mssql, every).record(0, starting=True)
    call = assert_one_statement(recorder, "worker_presence")  # describes nothing: no NULL parameter
    assert "[StartedAtUtc] = s.[StartedAtUtc]" in call.sql
    assert "CAST(NULL AS NVARCHAR(max)) AS [Queues]" in call.sql
    assert call.params == [("w-all", "h", 1, "0.1.0", 10, 0)]


def test_a_clean_exit_is_one_update_naming_the_process(mssql: Storage, recorder: Recorder) -> None:
    WorkerPresence(mssql, ME).stopped()
    call = assert_one_statement(recorder, "worker_stopped")
    assert call.sql.startswith("UPDATE chokaq.[Workers] SET [Running]=0, [LastSeenUtc]=SYSUTCDATETIME(), ")
    assert "[State]='stopped', [StoppedAtUtc]=SYSUTCDATETIME() WHERE" in call.sql
    assert call.params == [("воркер-1", "host-ü", 4242)]
    assert size_of(call, "воркер-1") == SQL_WVARCHAR and size_of(call, 4242) is float


def test_the_sweep_marks_lost_then_prunes_in_bounded_transactions(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^UPDATE chokaq\.\[Workers\] SET \[State\]='lost'", [], [], rowcount=2)
    recorder.answer(r"^DELETE FROM chokaq\.\[Workers\]", [], [], rowcount=0)
    assert WorkerDirectory(mssql).sweep(silent_for=600, retention=7 * 86400, batch_size=50) == (2, 0)
    # Two transactions of one statement each (the prune's batch came back short: no second).
    kinds = [c.kind for c in recorder.calls if c.kind in ("execute", "commit")]
    assert kinds == ["execute", "commit", "execute", "commit"]
    lost, prune = recorder.statements
    assert lost.describes == 0 and prune.describes == 0
    assert "WHERE chokaq.[Workers].[State] = 'live' AND chokaq.[Workers].[LastSeenUtc] < DATEADD(" in lost.sql
    assert lost.params == [(-600.0, -600.0, -600.0)]
    assert prune.sql.startswith("DELETE FROM chokaq.[Workers] WHERE chokaq.[Workers].[WorkerId] IN (SELECT TOP 50 ")
    assert "[State] IN ('stopped', 'lost') AND chokaq.[Workers].[StoppedAtUtc] < DATEADD(" in prune.sql
    assert "ORDER BY chokaq.[Workers].[StoppedAtUtc]" in prune.sql


def test_the_list_reads_workers_then_what_they_hold_and_their_zombies(mssql: Storage, recorder: Recorder) -> None:
    cols = [c.name for c in workers.c]
    row = ("воркер-1", "h", 1, "0.1.0", None, 4, 1, SEEN, SEEN, "live", None)
    recorder.answer(r"^SELECT TOP 500 chokaq\.\[Workers\]", [row], cols)
    recorder.answer(r"FROM chokaq\.\[JobsHot\]", [("воркер-1", 2)], ["WorkerId", "n"])
    recorder.answer(r"FROM chokaq\.\[JobsDLQ\]", [("воркер-1", 5)], ["WorkerId", "n"])
    (w,) = WorkerDirectory(mssql).list()
    assert (w.worker_id, w.state, w.holding, w.zombies, w.queues) == ("воркер-1", "live", 2, 5, None)
    listing, held, zombies = one_transaction(recorder)
    assert "ORDER BY CASE chokaq.[Workers].[State] WHEN ? THEN ? WHEN ? THEN ? ELSE ? END" in listing.sql
    # Held: Fetched or Processing, literals (the partial indexes); zombies: reason 2 (IX_JobsDLQ_ZombieWorker).
    assert "[Status] IN (1, 2)" in held.sql and "GROUP BY chokaq.[JobsHot].[WorkerId]" in held.sql
    assert "[FailureReason] = 2" in zombies.sql and held.params == [("воркер-1",)] == zombies.params
    assert size_of(held, "воркер-1") == SQL_WVARCHAR and size_of(zombies, "воркер-1") == SQL_WVARCHAR


def test_migration_7_creates_workers_and_the_zombie_index(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"PARSENAME\(CAST\(SERVERPROPERTY", [(16, 3, 160, "chokaq")], ["v", "e", "l", "d"])
    recorder.answer(r"sp_getapplock", [(0,)])
    recorder.answer(r"INFORMATION_SCHEMA", [("SchemaMigrations",)], ["TABLE_NAME"])
    recorder.answer(r"FROM chokaq\.\[SchemaMigrations\]", [(v,) for v, _, _ in MIGRATIONS if v != 7], ["Version"])
    assert mssql.upgrade() == [7]
    stmts = one_transaction(recorder)
    (create,) = [c.sql for c in stmts if "CREATE TABLE" in c.sql]
    assert "CREATE TABLE chokaq.[Workers]" in create
    assert "[WorkerId] NVARCHAR(100) COLLATE Latin1_General_100_BIN2 NOT NULL" in create
    assert "[LastSeenUtc] DATETIME2(7) NOT NULL" in create and "[StoppedAtUtc] DATETIME2(7) NULL" in create
    indexes = [c.sql for c in stmts if "CREATE INDEX" in c.sql]
    assert "CREATE INDEX [IX_Workers_StateLastSeen] ON chokaq.[Workers] ([State], [LastSeenUtc])" in indexes
    assert "CREATE INDEX [IX_JobsDLQ_ZombieWorker] ON chokaq.[JobsDLQ] ([WorkerId]) WHERE [FailureReason] = 2" in [
        s.strip() for s in indexes
    ]
    (record,) = [c for c in stmts if c.sql.startswith("INSERT INTO chokaq.[SchemaMigrations]")]
    assert record.params[0][:2] == (7, "Workers (worker presence), IX_JobsDLQ_ZombieWorker")
