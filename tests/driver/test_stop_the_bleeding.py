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

    deletes = [c for c in recorder.statements if c.sql.startswith("DELETE")]
    assert len(deletes) == 3
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
    assert len([c for c in recorder.statements if c.sql.startswith("DELETE")]) == 1
    assert not [c for c in recorder.statements if "[AuditLog]" in c.sql]  # nothing deleted: nothing audited
