"""The event feed on SQL Server, as far as the driver: the row a sweep writes with its audit row in
the transaction that moves the jobs, the follower's cursor read, the bounded purges (audited), a
worker's batch of failures with one feed row per reason, and migration 12: statement text,
parameter types and round trips."""

from __future__ import annotations

import datetime as dt
import json

from chokaq.domain.models import Lease
from chokaq.domain.states import FailureReason
from chokaq.storage import DeadLetter, EventFeed, Storage, purge_events
from chokaq.storage import event_feed as ef
from chokaq.storage.migrations import MIGRATIONS
from tests.driver.recording import Recorder
from tests.driver.test_contract_captures import SQL_VARCHAR, SQL_WVARCHAR, one_transaction, size_of

AT = dt.datetime(2026, 1, 1, 3, 0)
INSERT = "INSERT INTO chokaq.[EventFeed] ([AtUtc], [Kind], [Origin], [Data]) OUTPUT inserted.[Id] VALUES "


def test_a_feed_row_is_one_insert_with_the_database_clock_and_typed_text(mssql: Storage, recorder: Recorder) -> None:
    mssql.write(lambda c: ef.record(c, "dlq.batch", {"reason": "Ошибка", "count": 2}))
    (insert,) = one_transaction(recorder)
    assert insert.sql == INSERT + "(SYSUTCDATETIME(), ?, ?, ?)"
    kind, origin, data = insert.params[0]
    assert kind == "dlq.batch" and origin == mssql.origin and json.loads(data)["reason"] == "Ошибка"
    assert size_of(insert, "dlq.batch") == SQL_VARCHAR and size_of(insert, mssql.origin) == SQL_VARCHAR
    assert size_of(insert, data) == SQL_WVARCHAR


def test_the_follower_reads_a_range_after_its_cursor(mssql: Storage, recorder: Recorder) -> None:
    cols = ["Id", "AtUtc", "Kind", "Origin", "Data"]
    recorder.answer(r"^SELECT TOP 500 chokaq\.\[EventFeed\]", [(8, AT, "audit", "h:1:x", '{"action": "a"}')], cols)
    (row,) = EventFeed(mssql).after(7)
    assert (row.id, row.kind, row.origin, row.data) == (8, "audit", "h:1:x", {"action": "a"})
    (read,) = one_transaction(recorder)
    assert "WHERE chokaq.[EventFeed].[Id] > CAST(? AS BIGINT) ORDER BY chokaq.[EventFeed].[Id]" in read.sql
    assert read.params == [(7,)]


def test_the_purges_are_bounded_batches_under_the_lock_cap_and_not_audited(mssql: Storage, recorder: Recorder) -> None:
    by_count_sql = r"SELECT max\(chokaq\.\[EventFeed\]\.\[Id\]\)"
    recorder.answer(by_count_sql, [], [], rowcount=7)
    assert purge_events(mssql, max_age=3600, max_rows=500, size=50) == 7
    by_age, by_count = one_transaction(recorder)
    assert "[AtUtc] < DATEADD(SECOND" in by_age.sql and "ORDER BY chokaq.[EventFeed].[Id])" in by_age.sql
    assert (
        "(SELECT max(chokaq.[EventFeed].[Id]) AS max_1 \nFROM chokaq.[EventFeed]) - CAST(? AS BIGINT)" in by_count.sql
    )
    assert by_count.params == [(500,)]
    # A routine purge writes no AuditLog row (nothing purges AuditLog), and a batch as large as
    # Storage.CleanupBatchSize allows stays under SQL Server's lock-escalation cap.
    recorder.clear()
    purge_events(mssql, max_age=3600, max_rows=500, size=100_000)
    assert not [c for c in recorder.statements if "AuditLog" in c.sql]
    assert all("TOP 4000 " in c.sql for c in recorder.statements if c.sql.startswith("DELETE"))


def test_the_sweeps_rescue_writes_its_audit_and_feed_rows_in_the_moving_transaction(
    mssql: Storage, recorder: Recorder
) -> None:
    recorder.answer(r"^UPDATE chokaq\.\[JobsHot\] SET \[Status\]=0", [("01A",), ("01B",)], ["Id"])
    result = mssql.sweep(fetched_timeout=30, zombie_timeout=60, max_attempts=3)
    assert result.recovered == 2
    kinds = [c.kind for c in recorder.calls if c.kind in ("execute", "commit")]
    assert kinds[:4] == ["execute", "execute", "execute", "commit"]  # the move, its audit, its feed row
    recover, audit, feed = recorder.statements[:3]
    assert "OUTPUT inserted.[Id]" in recover.sql
    assert audit.sql.startswith("INSERT INTO chokaq.[AuditLog]") and "sweep.rescue" in audit.params[0]
    assert feed.sql.startswith(INSERT) and feed.params[0][0] == "zombie.rescue"
    data = json.loads(feed.params[0][2])
    assert (data["recovered"], data["archived"], data["ids"]) == (2, 0, ["01A", "01B"])


def test_a_batch_of_failures_is_one_transaction_with_one_feed_row_per_reason(
    mssql: Storage, recorder: Recorder
) -> None:
    recorder.answer(r"INSERT INTO chokaq\.\[JobsDLQ\]", [("01A", "q")], ["Id", "Queue"])
    recorder.answer(r"INSERT INTO chokaq\.\[JobsDLQ\]", [("01B", "q")], ["Id", "Queue"])
    fails = [
        DeadLetter(Lease("01A", "w", 1), FailureReason.MAX_RETRIES_EXCEEDED, "boom"),
        DeadLetter(Lease("01B", "w", 1), FailureReason.MAX_RETRIES_EXCEEDED, "boom"),
    ]
    assert mssql.fail_many(fails) == {"01A", "01B"}
    stmts = one_transaction(recorder)
    feeds = [c for c in stmts if c.sql.startswith(INSERT)]
    assert len(feeds) == 1 and len(stmts) == 3  # two moves (one batch each), one feed row
    data = json.loads(feeds[0].params[0][2])
    assert data["count"] == 2 and data["reason"] == FailureReason.MAX_RETRIES_EXCEEDED.label


def test_migration_12_creates_the_feed_table(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"PARSENAME\(CAST\(SERVERPROPERTY", [(16, 3, 160, "chokaq")], ["v", "e", "l", "d"])
    recorder.answer(r"sp_getapplock", [(0,)])
    recorder.answer(r"INFORMATION_SCHEMA", [("SchemaMigrations",)], ["TABLE_NAME"])
    recorder.answer(r"FROM chokaq\.\[SchemaMigrations\]", [(v,) for v, _, _ in MIGRATIONS if v != 12], ["Version"])
    assert mssql.upgrade() == [12]
    stmts = one_transaction(recorder, typed=False)
    (create,) = [c.sql for c in stmts if c.sql.startswith("\nCREATE TABLE") or c.sql.startswith("CREATE TABLE")]
    assert "[Id] BIGINT NOT NULL IDENTITY" in create and "OPTIMIZE_FOR_SEQUENTIAL_KEY = ON" in create
    assert any("CREATE INDEX [IX_EventFeed_AtUtc]" in c.sql for c in stmts)
