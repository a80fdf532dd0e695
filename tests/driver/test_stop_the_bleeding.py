"""SQL Server at the driver for DLQ retention and for cancelling running jobs: statement text,
parameter types and round trips (see recording.py)."""

from __future__ import annotations

import re
from datetime import datetime

from chokaq.storage import Storage
from chokaq.storage.admin import Actor, AdminStore
from tests.driver.recording import Call, Recorder

CUTOFF = datetime(2026, 1, 1)
SYSTEM = Actor("system:retention", "admin")


def _statements_touching(recorder: Recorder, table: str) -> list[Call]:
    return [c for c in recorder.statements if f"[{table}]" in c.sql]


def test_dlq_retention_is_one_bounded_delete_per_batch_with_its_audit_row(mssql: Storage, recorder: Recorder) -> None:
    # Two full batches of 2, then a short one: three transactions, each a delete and its audit row.
    recorder.answer(r"^DELETE FROM chokaq\.\[JobsDLQ\]", [], rowcount=2, once=True)
    recorder.answer(r"^DELETE FROM chokaq\.\[JobsDLQ\]", [], rowcount=2, once=True)
    recorder.answer(r"^DELETE FROM chokaq\.\[JobsDLQ\]", [], rowcount=1, once=True)
    assert AdminStore(mssql).purge_dlq_older(CUTOFF, SYSTEM, batch_size=2) == 5

    deletes = [c for c in recorder.statements if c.sql.startswith("DELETE FROM chokaq.[JobsDLQ]")]
    assert len(deletes) == 3
    # Each batch's step journals go first, chosen by the same bounded subquery, in its transaction.
    journals = [c for c in recorder.statements if c.sql.startswith("DELETE FROM chokaq.[JobSteps]")]
    assert len(journals) == 3
    for j in journals:
        assert "[JobSteps].[JobId] IN (SELECT TOP 2 chokaq.[JobsDLQ].[Id]" in j.sql
        assert j.param_count == 1 and j.params[0] == (CUTOFF,) and j.describes == 0
    for d in deletes:
        # The oldest rows by IX_JobsDLQ_FailedAt, TOP bound as a literal, two parameters only.
        oldest = r"SELECT TOP 2 chokaq\.\[JobsDLQ\]\.\[Id\].*ORDER BY chokaq\.\[JobsDLQ\]\.\[FailedAtUtc\]"
        assert re.search(oldest, d.sql, re.S)
        assert d.sql.count("[FailedAtUtc] < ?") == 2
        assert d.param_count == 2 and d.params[0] == (CUTOFF, CUTOFF)
        assert d.describes == 0
    audits = [c for c in recorder.statements if "INSERT INTO chokaq.[AuditLog]" in c.sql]
    assert len(audits) == 3
    assert all("system:retention" in c.params[0] and "dlq.retention" in c.params[0] for c in audits)
    assert all(c.describes == 0 for c in audits)
    # One transaction per batch: each delete and its audit row are committed together.
    commits = [c for c in recorder.calls if c.kind == "commit"]
    assert len(commits) == 3
    assert not _statements_touching(recorder, "JobsArchive")


def test_dlq_retention_stops_after_an_empty_batch(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^DELETE FROM chokaq\.\[JobsDLQ\]", [], rowcount=0)
    assert AdminStore(mssql).purge_dlq_older(CUTOFF, SYSTEM, batch_size=1000) == 0
    assert len([c for c in recorder.statements if c.sql.startswith("DELETE FROM chokaq.[JobsDLQ]")]) == 1
    assert not [c for c in recorder.statements if "[AuditLog]" in c.sql]  # nothing deleted: nothing audited


OPS = Actor("ops:alice", "operator")


def test_cancel_running_is_one_transaction_with_the_move_the_counter_and_the_audit(
    mssql: Storage, recorder: Recorder
) -> None:
    from tests.driver.rows import HOT, T0, columns, row

    held = row(HOT, "01P", Status=2, AttemptCount=1, WorkerId="w", StartedAtUtc=T0, HeartbeatUtc=T0)
    recorder.answer(r"^DELETE FROM chokaq\.\[JobsHot\] OUTPUT deleted\.", [held], columns(HOT))
    recorder.answer(r"^UPDATE chokaq\.\[StatsSummary\]", [], rowcount=1)  # the queue's counter row exists
    res = AdminStore(mssql).cancel(["01P", "01X"], OPS, running=True, reason="bad deploy")
    assert (res.affected, res.was_running, res.skipped_ids) == (1, ["01P"], ["01X"])

    trips = recorder.round_trips()
    statements = [c for c in trips if c.kind == "execute"]
    # The delete (its rows come back through OUTPUT), the insert, the counter, the audit row and its
    # event feed row; then one commit. SQL Server has no NOTIFY: the worker learns at its next heartbeat.
    move = statements[0]
    assert move.sql.startswith("DELETE FROM chokaq.[JobsHot] OUTPUT deleted.")
    assert "[Status] IN (0, 1, 2)" in move.sql
    assert move.params[0] == ("01P", "01X")
    insert = statements[1]
    assert insert.sql.startswith("INSERT INTO chokaq.[JobsDLQ]")
    (values,) = insert.params
    details = next(v for v in values if isinstance(v, str) and v.startswith("Cancelled by"))
    assert details.startswith("Cancelled by ops:alice: bad deploy\nIt was Processing on worker w (attempt 1")
    assert "[StatsSummary]" in statements[2].sql
    assert len(statements) == 5 and "INSERT INTO chokaq.[AuditLog]" in statements[3].sql
    assert statements[4].sql.startswith("INSERT INTO chokaq.[EventFeed]")  # the audit's feed row
    assert not [c for c in statements if "pg_notify" in c.sql]
    assert [c.kind for c in trips].count("commit") == 1
    assert all(c.describes == 0 for c in statements)


def test_cancel_pending_only_names_status_0(mssql: Storage, recorder: Recorder) -> None:
    AdminStore(mssql).cancel(["01A"], OPS)
    (move,) = [c for c in recorder.statements if c.sql.startswith("DELETE")]
    assert "[Status] IN (0)" in move.sql


def test_the_workers_cancel_lookup_is_one_statement_with_one_list_parameter(mssql: Storage, recorder: Recorder) -> None:
    from chokaq.domain.models import Lease
    from chokaq.storage.cancel import cancelled_runs

    leases = [Lease(f"01J{i:08d}", "w", 1 + i % 2) for i in range(1000)]
    recorder.answer(
        r"^SELECT chokaq\.\[JobsDLQ\]\.\[Id\], chokaq\.\[JobsDLQ\]\.\[AttemptCount\]",
        [(leases[0].job_id, 1), (leases[1].job_id, 1)],
        ["Id", "AttemptCount"],
    )
    # The second row is the same job at another attempt: another run, not this one's.
    assert cancelled_runs(mssql, "w", leases) == {leases[0].job_id}
    (call,) = [c for c in recorder.round_trips() if c.kind == "execute"]
    assert "OPENJSON" in call.sql and "[FailureReason] = 1" in call.sql
    assert call.param_count == 2 and call.describes == 0  # the ids as one JSON text, and the worker


def test_the_stop_note_is_one_fenced_update(mssql: Storage, recorder: Recorder) -> None:
    from chokaq.domain.models import Lease
    from chokaq.storage.cancel import note_stopped

    recorder.answer(r"^UPDATE chokaq\.\[JobsDLQ\]", [], rowcount=1)
    assert note_stopped(mssql, Lease("01P", "w", 1), "\nIts handler stopped at T.")
    (call,) = recorder.round_trips()
    assert call.sql.startswith(
        "UPDATE chokaq.[JobsDLQ] SET [ErrorDetails]=(coalesce(chokaq.[JobsDLQ].[ErrorDetails], '') + ?)"
    )
    assert "[FailureReason] = 1" in call.sql and "[AttemptCount] = ?" in call.sql and "[WorkerId] = ?" in call.sql
    assert call.describes == 0
