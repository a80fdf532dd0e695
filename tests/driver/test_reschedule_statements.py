"""An operator's reschedule on SQL Server, at the driver: one guarded UPDATE (the claim's race is
settled by its ``Status = 0`` guard), the audit row in the same transaction, typed parameters."""

from __future__ import annotations

from datetime import datetime

import pytest

from chokaq.domain.errors import ConflictError
from chokaq.storage import Storage
from chokaq.storage.admin import Actor, AdminStore
from tests.driver.recording import Recorder
from tests.driver.rows import HOT, columns, row

ME = Actor("ops", "operator")
LATER = datetime(2027, 1, 5, 7, 0)


def test_a_reschedule_is_one_guarded_update_and_its_audit_in_one_transaction(
    mssql: Storage, recorder: Recorder
) -> None:
    recorder.answer(r"^SELECT chokaq\.\[JobsHot\]\.\[Status\]", [(0, datetime(2026, 12, 3))], ["Status", "S"])
    recorder.answer(r"^UPDATE chokaq\.\[JobsHot\]", rowcount=1)
    recorder.answer(r"^SELECT chokaq\.\[JobsHot\]\.\[Id\]", [row(HOT, "01R", ScheduledAtUtc=LATER)], columns(HOT))
    rec = AdminStore(mssql).reschedule("01R", LATER, ME)
    assert rec.scheduled_at_utc == LATER
    statements = recorder.statements
    update = next(c for c in statements if c.sql.startswith("UPDATE chokaq.[JobsHot]"))
    assert "[ScheduledAtUtc]=?" in update.sql and "[LastUpdatedUtc]=SYSUTCDATETIME()" in update.sql
    assert "WHERE chokaq.[JobsHot].[Id] = ? AND chokaq.[JobsHot].[Status] = 0" in update.sql
    assert LATER in update.params[0] and update.describes == 0
    audit = next(c for c in statements if c.sql.startswith("INSERT INTO chokaq.[AuditLog]"))
    assert "job.reschedule" in audit.params[0]
    commits = [i for i, c in enumerate(recorder.calls) if c.kind == "commit"]
    assert len(commits) == 1 and recorder.calls.index(audit) < commits[0]
    assert all(c.describes == 0 for c in statements if c is not audit)


def test_run_now_takes_the_database_clock(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^SELECT chokaq\.\[JobsHot\]\.\[Status\]", [(0, LATER)], ["Status", "S"])
    recorder.answer(r"^UPDATE chokaq\.\[JobsHot\]", rowcount=1)
    recorder.answer(r"^SELECT chokaq\.\[JobsHot\]\.\[Id\]", [row(HOT, "01R")], columns(HOT))
    AdminStore(mssql).reschedule("01R", None, ME)
    update = next(c for c in recorder.statements if c.sql.startswith("UPDATE chokaq.[JobsHot]"))
    assert "[ScheduledAtUtc]=SYSUTCDATETIME()" in update.sql


def test_a_job_no_longer_pending_rolls_back_with_a_conflict(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^SELECT chokaq\.\[JobsHot\]\.\[Status\]", [(1, LATER)], ["Status", "S"])
    recorder.answer(r"^UPDATE chokaq\.\[JobsHot\]", rowcount=0)
    with pytest.raises(ConflictError):
        AdminStore(mssql).reschedule("01R", LATER, ME)
    assert not [c for c in recorder.statements if c.sql.startswith("INSERT INTO chokaq.[AuditLog]")]
    assert [c.kind for c in recorder.calls if c.kind in ("commit", "rollback")][:1] == ["rollback"]
