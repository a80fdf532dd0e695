"""The step journal on SQL Server, at the driver: a step's start and its end are one statement each
(one round trip, no transaction around them), fenced by the worker and attempt with the JobsHot row
update-locked, every parameter typed; the journal's reads and removals likewise."""

from __future__ import annotations

from datetime import datetime

from chokaq.domain.models import Lease
from chokaq.domain.states import FailureReason
from chokaq.storage import Storage, settle_verdict
from chokaq.storage.admin import Actor, AdminStore
from chokaq.storage.steps import finish_step, load_steps, start_step
from tests.driver.recording import Call, Recorder
from tests.driver.rows import DLQ, HOT, columns, row
from tests.driver.test_contract_captures import SQL_VARCHAR, SQL_WVARCHAR, size_of

LEASE = Lease("01S", "worker-ä", 3)
FENCE = (
    "FROM chokaq.[JobsHot] WITH (UPDLOCK, ROWLOCK) \nWHERE chokaq.[JobsHot].[Id] = ? AND chokaq.[JobsHot].[Status] = 2 "
    "AND chokaq.[JobsHot].[WorkerId] = ? AND chokaq.[JobsHot].[AttemptCount] = ?"
)
STEP_COLUMNS = ["Name", "Attempt", "WorkerId", "State", "StartedAtUtc", "DoneAtUtc", "Result"]


def only_statement(recorder: Recorder) -> Call:
    """The one statement sent, alone: on an autocommit connection, no commit round trip."""
    (call,) = recorder.statements
    assert [c for c in recorder.round_trips() if c.kind != "execute"] == []
    recorder.clear()
    return call


def test_a_step_start_is_one_fenced_insert(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^INSERT INTO chokaq\.\[JobSteps\]", [(0,)], ["State"])
    assert start_step(mssql, LEASE, "charge-card ₤", again=False)
    call = only_statement(recorder)
    assert call.sql.startswith("INSERT INTO chokaq.[JobSteps] ([JobId], [Name], [Attempt], [WorkerId], [State]")
    assert "OUTPUT inserted.[State] SELECT" in call.sql and FENCE in call.sql
    assert "NOT (EXISTS (SELECT 1 \nFROM chokaq.[JobSteps]" in call.sql
    assert call.params == [("charge-card ₤", "01S", "worker-ä", 3, "01S", "charge-card ₤")]
    assert size_of(call, "charge-card ₤") == SQL_WVARCHAR and size_of(call, "01S") == SQL_VARCHAR
    assert size_of(call, "worker-ä") == SQL_WVARCHAR and call.describes == 0


def test_a_refused_start_reads_whether_it_was_its_own_replay(mssql: Storage, recorder: Recorder) -> None:
    # Nothing inserted, and the job is not held: refused, after one read of the fence (no journal read).
    recorder.answer(r"^INSERT INTO chokaq\.\[JobSteps\]", [], ["State"])
    recorder.answer(r"^SELECT 1", [], ["c"])
    assert not start_step(mssql, LEASE, "charge", again=False)
    insert, fence = recorder.statements
    assert insert.sql.startswith("INSERT INTO chokaq.[JobSteps]")
    assert fence.sql.startswith("SELECT 1 \nFROM chokaq.[JobsHot]") and "UPDLOCK" not in fence.sql
    assert fence.params == [("01S", "worker-ä", 3)] and fence.describes == 0


def test_a_start_again_and_the_ends_are_one_fenced_update_each(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^UPDATE chokaq\.\[JobSteps\]", [(0,)], ["State"])
    assert start_step(mssql, LEASE, "charge", again=True)
    again = only_statement(recorder)
    assert "[State]=0" in again.sql and "[DoneAtUtc]=NULL, [Result]=NULL" in again.sql
    assert "[JobSteps].[State] != 1" in again.sql and FENCE in again.sql and again.describes == 0

    recorder.answer(r"^UPDATE chokaq\.\[JobSteps\]", [(1,)], ["State"])
    assert finish_step(mssql, LEASE, "charge", '{"charge":"ch_1"}')
    done = only_statement(recorder)
    assert "SET [State]=?, [DoneAtUtc]=SYSUTCDATETIME(), [Result]=? OUTPUT inserted.[State]" in done.sql
    assert "[JobSteps].[Attempt] = ? AND chokaq.[JobSteps].[WorkerId] = ?" in done.sql and FENCE in done.sql
    assert done.params[0][:2] == (1, '{"charge":"ch_1"}')
    assert size_of(done, '{"charge":"ch_1"}') == SQL_WVARCHAR and done.describes == 0

    # A result of None is NULL in the text: a NULL parameter, even typed, costs a describe.
    recorder.answer(r"^UPDATE chokaq\.\[JobSteps\]", [(2,)], ["State"])
    assert finish_step(mssql, LEASE, "charge", None, failed=True)
    failed = only_statement(recorder)
    assert "[Result]=NULL OUTPUT" in failed.sql and failed.params[0][0] == 2
    assert failed.nulls == [] and failed.describes == 0

    recorder.answer(r"^UPDATE chokaq\.\[JobSteps\]", [(1,)], ["State"])
    assert finish_step(mssql, LEASE, "charge", '"found"', resolve=True)
    marked = only_statement(recorder)
    assert "[Attempt]=?, [WorkerId]=?, [State]=1" in marked.sql and "[JobSteps].[State] = 0" in marked.sql
    assert marked.describes == 0


def test_the_journal_is_one_read(mssql: Storage, recorder: Recorder) -> None:
    at = datetime(2026, 12, 3, 10, 0)
    recorder.answer(
        r"^SELECT chokaq\.\[JobSteps\]\.\[Name\]",
        [("one", 1, "w", 1, at, at, '"r"'), ("two", 1, "w", 0, at, None, None)],
        STEP_COLUMNS,
    )
    steps = load_steps(mssql, "01S")
    assert [(s.name, s.state, s.value()) for s in steps] == [("one", "done", "r"), ("two", "started", None)]
    (read,) = recorder.statements
    assert "WHERE chokaq.[JobSteps].[JobId] = ? ORDER BY chokaq.[JobSteps].[StartedAtUtc]" in read.sql
    assert read.params == [("01S",)] and size_of(read, "01S") == SQL_VARCHAR


def test_a_purge_removes_the_journals_of_the_purged_jobs_in_its_transaction(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^SELECT chokaq\.\[JobsDLQ\]\.\[Id\]", [("01A",), ("01B",)], ["Id"])
    failed, seen = datetime(2026, 12, 3, 14, 2, 30), datetime(2026, 12, 3, 14, 2, 11)
    purged = [("01A", "w-x", int(FailureReason.ZOMBIE), failed, seen), ("01B", "w-x", 1, failed, None)]
    recorder.answer(
        r"^DELETE FROM chokaq\.\[JobsDLQ\]", purged, ["Id", "WorkerId", "FailureReason", "FailedAtUtc", "HeartbeatUtc"]
    )
    recorder.answer(r"^DELETE FROM chokaq\.\[JobSteps\]", rowcount=3)
    res = AdminStore(mssql).purge_dlq(Actor("ops", "admin"), ids=["01A", "01B"])
    assert res.affected == 2
    # The DELETE returns what the crash incidents need of each row (one statement still), and the
    # audit row records the zombie among them under its worker (storage/incidents.py).
    gone = next(c for c in recorder.statements if c.sql.startswith("DELETE FROM chokaq.[JobsDLQ]"))
    assert "OUTPUT deleted.[Id], deleted.[WorkerId], deleted.[FailureReason], deleted.[FailedAtUtc], " in gone.sql
    audit = next(c for c in recorder.statements if c.sql.startswith("INSERT INTO chokaq.[AuditLog]"))
    details = next(p for p in audit.params[0] if isinstance(p, str) and p.startswith("{"))
    assert '"zombies": [{"worker": "w-x", "jobs": 1, "first_failed": "2026-12-03T14:02:30"' in details
    journal = next(c for c in recorder.statements if c.sql.startswith("DELETE FROM chokaq.[JobSteps]"))
    assert "IN (SELECT CAST([value] AS VARCHAR(50))" in journal.sql and "OPENJSON" in journal.sql
    assert journal.params == [('["01A", "01B"]',)] and journal.describes == 0
    commits = [i for i, c in enumerate(recorder.calls) if c.kind == "commit"]
    assert len(commits) == 1 and recorder.calls.index(journal) < commits[0]  # one transaction


def test_a_resurrect_from_scratch_clears_the_journal_in_its_transaction(mssql: Storage, recorder: Recorder) -> None:
    dead = row(DLQ, "01A")
    recorder.answer(r"^SELECT chokaq\.\[JobsDLQ\]", [dead], columns(DLQ))
    recorder.answer(r"^DELETE FROM chokaq\.\[JobsDLQ\]", [dead], columns(DLQ))
    recorder.answer(r"^UPDATE chokaq\.\[StatsSummary\] SET \[FailedTotal\]", rowcount=1)
    recorder.answer(r"^SELECT chokaq\.\[Queues\]\.\[Name\]", [("default",)], ["Name"])
    recorder.answer(r"^SELECT chokaq\.\[JobSteps\]\.\[JobId\]", [("01A", 2)], ["JobId", "n"])
    recorder.answer(r"^DELETE FROM chokaq\.\[JobSteps\]", rowcount=2)
    recorder.answer(r"^SELECT chokaq\.\[JobsHot\]", [row(HOT, "01A", Status=0, WorkerId=None)], columns(HOT))
    AdminStore(mssql).resurrect("01A", Actor("ops", "operator"), steps="scratch")
    counts = next(c for c in recorder.statements if c.sql.startswith("SELECT chokaq.[JobSteps].[JobId]"))
    assert "count(*)" in counts.sql and "GROUP BY chokaq.[JobSteps].[JobId]" in counts.sql
    cleared = next(c for c in recorder.statements if c.sql.startswith("DELETE FROM chokaq.[JobSteps]"))
    audit = next(c for c in recorder.statements if c.sql.startswith("INSERT INTO chokaq.[AuditLog]"))
    assert recorder.statements.index(cleared) < recorder.statements.index(audit)
    details = next(p for p in audit.params[0] if isinstance(p, str) and p.startswith("{"))
    assert '"steps": "scratch"' in details and '"steps_cleared": 2' in details
    assert all(c.describes == 0 for c in (counts, cleared))


def test_a_done_verdict_moves_the_zombie_to_the_archive_in_one_transaction(mssql: Storage, recorder: Recorder) -> None:
    dead = row(DLQ, "01Z", FailureReason=int(FailureReason.ZOMBIE))
    recorder.answer(r"^DELETE FROM chokaq\.\[JobsDLQ\]", [dead], columns(DLQ))
    recorder.answer(r"^UPDATE chokaq\.\[StatsSummary\]", rowcount=1)
    recorder.answer(r"^UPDATE chokaq\.\[StatsSummary\]", rowcount=1)
    assert settle_verdict(AdminStore(mssql), "01Z", "done")
    words = [" ".join(c.sql.split()[:3]) for c in recorder.statements]
    assert words == [
        "DELETE FROM chokaq.[JobsDLQ]",
        "INSERT INTO chokaq.[JobsArchive]",
        "UPDATE chokaq.[StatsSummary] SET",
        "UPDATE chokaq.[StatsSummary] SET",
        "INSERT INTO chokaq.[AuditLog]",
        "INSERT INTO chokaq.[EventFeed]",
    ]
    delete = recorder.statements[0]
    assert "[FailureReason] = ?" in delete.sql and delete.params[0] == ("01Z", 2)
    assert [c.kind for c in recorder.calls].count("commit") == 1
    assert all(
        c.describes == 0 for c in recorder.statements if not c.sql.startswith("INSERT INTO chokaq.[JobsArchive]")
    )


def test_the_incidents_read_the_zombies_in_the_dlq_and_those_the_audit_log_saw_leave(
    mssql: Storage, recorder: Recorder
) -> None:
    from chokaq.storage import crash_incidents

    failed = datetime(2026, 12, 3, 14, 2, 30)
    recorder.answer(r"^SELECT TOP 10001 chokaq\.\[JobsDLQ\]", [("01Z", "w-x", failed, failed, None, None)],
                    ["Id", "WorkerId", "HeartbeatUtc", "FailedAtUtc", "n", "started"])  # fmt: skip
    left = '{"zombies": [{"worker": "w-x", "jobs": 3, "first_failed": "2026-12-03T14:02:29", "last_seen": null}]}'
    recorder.answer(r"^SELECT TOP 10001 chokaq\.\[AuditLog\]", [("dlq.purge", left)], ["Action", "Details"])
    (incident,), capped = crash_incidents(mssql)
    assert not capped
    assert (incident.worker_id, incident.jobs, incident.undecided, incident.purged) == ("w-x", 4, 1, 3)
    assert incident.first_failed_utc == datetime(2026, 12, 3, 14, 2, 29) and incident.last_failed_utc == failed
    read = next(c for c in recorder.statements if "chokaq.[AuditLog]" in c.sql)
    assert (
        "[Action] IN (?, ?, ?, ?) AND chokaq.[AuditLog].[AtUtc] >= ? AND chokaq.[AuditLog].[Details] LIKE ?" in read.sql
    )
    assert read.params[0][:4] == ("dlq.resurrect", "dlq.purge", "dlq.verify", "sweep.zombie_retry")
    assert read.params[0][5] == '%"zombies":%'
    assert size_of(read, '%"zombies":%') == SQL_WVARCHAR and read.describes == 0
