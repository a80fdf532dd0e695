"""Job logs on SQL Server, at the driver: the heartbeat, the archive, the DLQ move and the retry
carry a job's new logs and progress in the one statement each already is, typed NVARCHAR (no
parameter left for the server to describe), and a tick without new lines keeps its old text."""

from __future__ import annotations

import json

from chokaq.domain.job_logs import Notes
from chokaq.domain.models import Lease
from chokaq.domain.states import FailureReason
from chokaq.storage import Storage
from chokaq.storage.migrations import MIGRATIONS
from chokaq.storage.store import Completion
from tests.driver.recording import Recorder
from tests.driver.test_contract_captures import HISTORY, one_transaction, size_of
from tests.driver.test_statements import assert_one_statement

SQL_WVARCHAR = -9
LEASES = [Lease("01A", "w", 1), Lease("01B", "w", 1)]
LOGS = '{"attempt":1,"worker":"w","dropped":0,"lines":[{"t":1,"l":"INFO","m":"\\u0417\\u0430\\u0433"}]}'
PROGRESS = '{"done":3,"total":10,"t":1}'
LOOKUP = "(SELECT [value] FROM OPENJSON(CAST(? AS NVARCHAR(max))) WHERE [key] COLLATE Latin1_General_100_BIN2 = "


def test_a_heartbeat_with_new_lines_is_still_one_statement_and_one_without_keeps_its_text(
    mssql: Storage, recorder: Recorder
) -> None:
    mssql.heartbeat("w", LEASES[:1])  # the autocommit pool's first connection
    recorder.clear()

    recorder.answer(r"SET \[HeartbeatUtc\]", [("01A",), ("01B",)], ["Id"])
    assert mssql.heartbeat("w", LEASES) == {"01A", "01B"}
    plain = assert_one_statement(recorder, "heartbeat")
    assert "[Logs]" not in plain.sql and "[Progress]" not in plain.sql

    recorder.answer(r"SET \[HeartbeatUtc\]", [("01A",), ("01B",)], ["Id"])
    assert mssql.heartbeat("w", LEASES, {"01A": Notes(LOGS, None), "01B": Notes(None, PROGRESS)}) == {"01A", "01B"}
    beat = assert_one_statement(recorder, "heartbeat with notes")
    assert f"[Logs]=coalesce({LOOKUP}chokaq.[JobsHot].[Id]), chokaq.[JobsHot].[Logs])" in beat.sql
    assert f"[Progress]=coalesce({LOOKUP}chokaq.[JobsHot].[Id]), chokaq.[JobsHot].[Progress])" in beat.sql
    # Each mapping names only the jobs that have a new value; both bound as NVARCHAR(max).
    logs, progress = json.dumps({"01A": LOGS}), json.dumps({"01B": PROGRESS})
    assert size_of(beat, logs) == SQL_WVARCHAR and size_of(beat, progress) == SQL_WVARCHAR


def test_an_archive_of_a_batch_writes_the_lines_the_last_heartbeat_did_not(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^SET NOCOUNT ON", [("01A", "default"), ("01B", "default")], ["Id", "Queue"])
    done = [Completion(LEASES[0], 5, Notes(LOGS, PROGRESS)), Completion(LEASES[1], 7)]
    assert mssql.complete("w", done) == {"01A", "01B"}
    batch = assert_one_statement(recorder, "complete with notes")
    assert "[Attempts], [Logs], [Progress]) OUTPUT inserted.[Id]" in batch.sql
    assert f"coalesce({LOOKUP}chokaq.[JobsHot].[Id]), chokaq.[JobsHot].[Logs])" in batch.sql
    assert size_of(batch, json.dumps({"01A": LOGS})) == SQL_WVARCHAR

    # Successes that logged nothing: the archive's statement as it was before job logs.
    recorder.answer(r"^SET NOCOUNT ON", [("01A", "default")], ["Id", "Queue"])
    assert mssql.complete("w", [Completion(LEASES[0], 5)]) == {"01A"}
    plain = assert_one_statement(recorder, "complete")
    assert "OPENJSON(CAST(? AS NVARCHAR(max))) WHERE [key]" not in plain.sql


def test_a_failure_and_a_retry_carry_the_jobs_logs_in_their_own_statements(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^SET NOCOUNT ON", [("01A", "default")], ["Id", "Queue"])
    assert mssql.fail(LEASES[0], FailureReason.MAX_RETRIES_EXCEEDED, "boom", HISTORY, Notes(LOGS, PROGRESS))
    # The logs ride in the move; its event feed row follows in the same transaction.
    batch, feed, commit = recorder.round_trips()[:3]
    assert feed.sql.startswith("INSERT INTO chokaq.[EventFeed]") and commit.kind == "commit"
    assert "[Attempts], [Logs], [Progress]) OUTPUT inserted.[Id]" in batch.sql
    assert batch.describes == 0
    assert size_of(batch, LOGS) == SQL_WVARCHAR and size_of(batch, PROGRESS) == SQL_WVARCHAR
    recorder.clear()

    recorder.answer(r"^UPDATE chokaq\.\[JobsHot\] SET \[Status\]=0", [("mail",)], ["Queue"])
    recorder.answer(r"^UPDATE chokaq\.\[StatsSummary\] SET \[RetriedTotal\]", rowcount=1)
    assert mssql.retry(LEASES[0], 2.5, HISTORY, Notes(LOGS, None))
    move, count = one_transaction(recorder)
    assert "[Attempts]=?, [Logs]=? OUTPUT inserted.[Queue]" in move.sql and "[Progress]" not in move.sql
    assert size_of(move, LOGS) == SQL_WVARCHAR and move.describes == 0
    assert count.params == [(1, "mail")]


def test_migration_9_adds_logs_and_progress_to_the_three_job_tables(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"PARSENAME\(CAST\(SERVERPROPERTY", [(16, 3, 160, "chokaq")], ["v", "e", "l", "d"])
    recorder.answer(r"sp_getapplock", [(0,)])
    recorder.answer(r"INFORMATION_SCHEMA", [("SchemaMigrations",)], ["TABLE_NAME"])
    recorder.answer(r"FROM chokaq\.\[SchemaMigrations\]", [(v,) for v, _, _ in MIGRATIONS if v != 9], ["Version"])
    assert mssql.upgrade() == [9]
    stmts = one_transaction(recorder)
    adds = [c.sql for c in stmts if "ALTER TABLE" in c.sql]
    assert adds == [
        f"IF COL_LENGTH('chokaq.{t}', '{c}') IS NULL ALTER TABLE chokaq.[{t}] ADD [{c}] {kind} NULL"
        for t in ("JobsHot", "JobsArchive", "JobsDLQ")
        for c, kind in (("Logs", "NVARCHAR(max)"), ("Progress", "NVARCHAR(4000)"))
    ]
    (record,) = [c for c in stmts if c.sql.startswith("INSERT INTO chokaq.[SchemaMigrations]")]
    assert record.params[0][0] == 9
