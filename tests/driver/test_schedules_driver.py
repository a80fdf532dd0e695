"""The schedules' firing on SQL Server, as far as the driver: the statements' text and lock hints,
their parameter types, and the round trips of one firing transaction."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from chokaq.domain.models import EnqueueRequest
from chokaq.storage import ScheduleStore, Storage
from chokaq.storage.migrations import MIGRATIONS
from chokaq.storage.schema import schedules
from tests.driver.recording import Recorder
from tests.driver.test_contract_captures import SQL_VARCHAR, SQL_WVARCHAR, first_words, one_transaction, size_of

NOW = datetime(2026, 1, 1, 3, 0, 0, 250_000)
DUE = datetime(2026, 1, 1, 3, 0, 0)


def schedule_row(**values: Any) -> tuple[Any, ...]:
    row = {
        "Name": "Ночной-отчёт",
        "JobType": "report_v1",
        "Queue": "reports",
        "Payload": '{"name":"q3"}',
        "Priority": 10,
        "Cron": "0 3 * * *",
        "TimeZone": "UTC",
        "MissedPolicy": "latest",
        "MissedMax": 10,
        "NextDueUtc": DUE,
        "IsPaused": False,
        "IsOrphaned": False,
        "CreatedAtUtc": DUE,
        "LastUpdatedUtc": DUE,
        "now_utc": NOW,
        **values,
    }
    return tuple(row.get(c) for c in [*(c.name for c in schedules.c), "now_utc"])


COLUMNS = [*(c.name for c in schedules.c), "now_utc"]


def test_the_due_read_is_one_statement_without_locks(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"FROM chokaq\.\[Schedules\]", [("a",), ("b",)], ["Name"])
    assert ScheduleStore(mssql).due() == ["a", "b"]
    (call,) = recorder.statements
    assert call.sql.startswith("SELECT chokaq.[Schedules].[Name] \nFROM chokaq.[Schedules] \nWHERE")
    assert "[NextDueUtc] <= SYSUTCDATETIME()" in call.sql and "WITH (" not in call.sql
    assert call.params == [()]


def test_a_firing_is_one_transaction_lock_insert_advance(mssql: Storage, recorder: Recorder) -> None:
    mssql.enqueue(EnqueueRequest(type="report_v1", queue="reports"))  # the queue's row, known from then on
    recorder.clear()
    recorder.answer(r"WITH \(UPDLOCK, READPAST, ROWLOCK\)", [schedule_row()], COLUMNS)
    fired = ScheduleStore(mssql).fire("Ночной-отчёт", grace=60)
    assert fired is not None and fired.slots == [DUE] and fired.next_due == datetime(2026, 1, 2, 3, 0)
    stmts = one_transaction(recorder, savepoints=True)
    assert first_words(stmts) == [
        "SELECT chokaq.[Schedules].[Name],",
        "SELECT chokaq.[JobsHot].[Id]",
        "IF @@TRANCOUNT",
        "SAVE TRANSACTION",
        "INSERT INTO",
        "UPDATE chokaq.[Schedules]",
        "INSERT INTO",  # the firing's event feed row
    ]
    lock, lookup, insert, advance, feed = stmts[0], stmts[1], stmts[4], stmts[5], stmts[6]
    assert feed.sql.startswith("INSERT INTO chokaq.[EventFeed]") and feed.params[0][0] == "schedule.fired"
    # The lock: READPAST skips a row another process is firing, UPDLOCK holds ours to the commit.
    assert "FROM chokaq.[Schedules] WITH (UPDLOCK, READPAST, ROWLOCK) \nWHERE" in lock.sql
    assert "[NextDueUtc] <= SYSUTCDATETIME()" in lock.sql and "[IsPaused] = 0" in lock.sql
    assert lock.params == [("Ночной-отчёт",)] and size_of(lock, "Ночной-отчёт") == SQL_WVARCHAR
    key = "schedule:Ночной-отчёт@2026-01-01T03:00:00Z"
    assert lookup.params == [(key,)] and size_of(lookup, key) == SQL_WVARCHAR
    assert "[IdempotencyKey]" in insert.sql and size_of(insert, key) == SQL_WVARCHAR
    assert size_of(insert, fired.job_ids[0]) == SQL_VARCHAR
    assert advance.sql.startswith(
        "UPDATE chokaq.[Schedules] SET [NextDueUtc]=?, [LastSlotUtc]=?, [LastFiredUtc]=SYSUTCDATETIME(), [LastJobId]=?"
    )
    assert advance.params == [(datetime(2026, 1, 2, 3, 0), DUE, fired.job_ids[0], "Ночной-отчёт")]
    assert size_of(advance, DUE) is datetime and size_of(advance, "Ночной-отчёт") == SQL_WVARCHAR


def test_a_row_another_process_holds_costs_one_statement_and_the_commit(mssql: Storage, recorder: Recorder) -> None:
    # READPAST: the held (or no longer due) row is not returned; nothing else is sent.
    assert ScheduleStore(mssql).fire("nightly", grace=60) is None
    (lock,) = one_transaction(recorder)
    assert "WITH (UPDLOCK, READPAST, ROWLOCK)" in lock.sql


def test_a_skipped_slot_moves_the_row_without_a_job(mssql: Storage, recorder: Recorder) -> None:
    # Every slot since 1 December missed (the newest nine hours ago) under "skip": no job, and
    # the row moves on (its last slot and job stay).
    old = datetime(2025, 12, 1, 3, 0)
    noon = datetime(2026, 1, 1, 12, 0)
    recorder.answer(r"WITH \(UPDLOCK", [schedule_row(MissedPolicy="skip", NextDueUtc=old, now_utc=noon)], COLUMNS)
    fired = ScheduleStore(mssql).fire("Ночной-отчёт", grace=60)
    assert fired is not None and fired.job_ids == [] and fired.dropped > 1
    lock, advance = one_transaction(recorder)
    assert "WITH (UPDLOCK, READPAST, ROWLOCK)" in lock.sql
    assert advance.sql.startswith("UPDATE chokaq.[Schedules] SET [NextDueUtc]=? WHERE")
    assert advance.params == [(datetime(2026, 1, 2, 3, 0), "Ночной-отчёт")]


def test_migration_5_creates_the_table_and_its_index(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"PARSENAME\(CAST\(SERVERPROPERTY", [(16, 3, 160, "chokaq")], ["v", "e", "l", "d"])
    recorder.answer(r"sp_getapplock", [(0,)])
    recorder.answer(r"INFORMATION_SCHEMA", [("SchemaMigrations",)], ["TABLE_NAME"])
    recorder.answer(r"FROM chokaq\.\[SchemaMigrations\]", [(v,) for v, _, _ in MIGRATIONS if v != 5], ["Version"])
    assert mssql.upgrade() == [5]
    stmts = one_transaction(recorder)
    (create,) = [c.sql for c in stmts if "CREATE TABLE" in c.sql]
    assert create.startswith("\nCREATE TABLE chokaq.[Schedules]") or create.lstrip().startswith(
        "CREATE TABLE chokaq.[Schedules]"
    )
    assert "[Name] NVARCHAR(200) COLLATE Latin1_General_100_BIN2 NOT NULL" in create
    assert "[NextDueUtc] DATETIME2(7) NOT NULL" in create
    assert any("CREATE INDEX [IX_Schedules_NextDue] ON chokaq.[Schedules] ([NextDueUtc])" in c.sql for c in stmts)
    (record,) = [c for c in stmts if c.sql.startswith("INSERT INTO chokaq.[SchemaMigrations]")]
    assert record.params[0][:2] == (5, "Schedules (recurring jobs)")
