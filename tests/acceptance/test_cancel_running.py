"""Cancelling running jobs in real worker processes: the operator's cancel (the real CLI) reaches
the handler (at once on PostgreSQL through NOTIFY, at the next heartbeat elsewhere), the job is in
the DLQ as Cancelled with who and why, a handler that ignores it cannot archive its job afterwards,
and the counters stay exact."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import FailureReason, Location
from chokaq.storage import AdminStore, Storage
from tests.acceptance.conftest import run_cli
from tests.helpers import counts, totals, wait_for

# PostgreSQL: heartbeats far apart (none in a test's time), so only the NOTIFY can stop the handler.
NO_HEARTBEAT_SOON = {
    "CHOKAQ_EXECUTION__HEARTBEAT_INTERVAL_MIN": "300",
    "CHOKAQ_EXECUTION__HEARTBEAT_INTERVAL_MAX": "300",
    "CHOKAQ_RECOVERY__PROCESSING_ZOMBIE_TIMEOUT": "3600",
}


@pytest.fixture
def s(db_url: str) -> Iterator[Storage]:
    storage = Storage(db_url)
    storage.upgrade()
    try:
        yield storage
    finally:
        storage.close()


def records(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    return [(line.split()[0], line.split()[1]) for line in path.read_text().splitlines()]


def worker_env(db_url: str) -> dict[str, str]:
    """On PostgreSQL the worker may learn only by NOTIFY; elsewhere by its (fast) heartbeats."""
    return NO_HEARTBEAT_SOON if db_url.startswith("postgresql") else {}


def cancel(db_url: str, job_id: str, *extra: str) -> dict[str, Any]:
    out = run_cli(db_url, "job", "cancel", job_id, "--actor", "ops:alice", "--reason", "bad deploy", *extra)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize("job_type", ["cancel_async", "cancel_thread"])
def test_a_running_handler_is_cancelled_and_its_job_is_in_the_dlq(
    db_url: str, s: Storage, tmp_path: Path, workers: Any, job_type: str
) -> None:
    job_id, _ = s.enqueue(EnqueueRequest(type=job_type))
    other, _ = s.enqueue(EnqueueRequest(type="record"))  # another job the worker runs on
    record = tmp_path / "record.txt"
    workers(db_url, record, **worker_env(db_url))
    wait_for(lambda: ("start", job_id) in records(record))
    wait_for(lambda: s.get_job(other).location is Location.ARCHIVE)  # type: ignore[union-attr]

    out = cancel(db_url, job_id)
    assert out == {"cancelled": 1, "was_running": [job_id], "skipped_ids": []}
    # The handler hears why: an async one by CancelledError, a thread one by ctx.
    wait_for(lambda: ("cancelled:cancelled", job_id) in records(record))
    dead = s.get_job(job_id)
    assert dead is not None and dead.location is Location.DLQ
    assert dead.failure_reason is FailureReason.CANCELLED
    details = dead.error_details or ""
    assert details.startswith("Cancelled by ops:alice: bad deploy\nIt was Processing on worker ")
    assert "(attempt 1, started " in details and "its handler was still running and was told to stop" in details
    # ... and, once the handler ended, when.
    wait_for(lambda: "Its handler stopped at " in (s.get_job(job_id).error_details or ""))  # type: ignore[union-attr]
    assert totals(s) == (1, 1, 0)  # succeeded (the other job), failed (the cancel), retried
    assert counts(s) == {"archive": 1, "dlq": 1}
    (audit,) = [a for a in AdminStore(s).list_audit(job_id=job_id)[0] if a["action"] == "job.cancel"]
    assert audit["actor"] == "ops:alice" and audit["details"]["reason"] == "bad deploy"
    assert [r["id"] for r in audit["details"]["was_running"]] == [job_id]


def test_a_thread_handler_that_ignores_the_cancel_cannot_archive_its_job(
    db_url: str, s: Storage, tmp_path: Path, workers: Any
) -> None:
    release = tmp_path / "release"
    job_id, _ = s.enqueue(EnqueueRequest(type="ignore_cancel", payload=json.dumps({"release": str(release)})))
    record = tmp_path / "record.txt"
    workers(db_url, record, **worker_env(db_url))
    wait_for(lambda: ("start", job_id) in records(record))
    assert cancel(db_url, job_id)["was_running"] == [job_id]
    # The worker has let go of it (its log says so) while the thread runs on; then it returns.
    log = record.with_suffix(".worker0.log")
    wait_for(lambda: "its handler runs on in its thread" in log.read_text())
    release.touch()
    wait_for(lambda: ("finished", job_id) in records(record))
    wait_for(lambda: "its thread ended after the cancel" in (s.get_job(job_id).error_details or ""))  # type: ignore[union-attr]
    # Its success was refused: still dead, nothing archived, nothing counted twice.
    dead = s.get_job(job_id)
    assert dead is not None and dead.location is Location.DLQ and dead.failure_reason is FailureReason.CANCELLED
    assert counts(s) == {"archive": 0, "dlq": 1}
    assert totals(s) == (0, 1, 0)
    # Resurrect works as for any dead job: it runs again and, released, succeeds.
    out = run_cli(db_url, "dlq", "resurrect", job_id, "--yes")
    assert out.returncode == 0, out.stderr
    wait_for(lambda: s.get_job(job_id).location is Location.ARCHIVE)  # type: ignore[union-attr]
    assert totals(s) == (1, 0, 0)


def test_pending_only_skips_a_running_job(db_url: str, s: Storage, tmp_path: Path, workers: Any) -> None:
    job_id, _ = s.enqueue(EnqueueRequest(type="cancel_async"))
    record = tmp_path / "record.txt"
    workers(db_url, record)
    wait_for(lambda: ("start", job_id) in records(record))
    out = run_cli(db_url, "job", "cancel", job_id, "--pending-only")
    assert out.returncode == 1 and "nothing was cancelled" in out.stderr
    assert json.loads(out.stdout) == {"cancelled": 0, "was_running": [], "skipped_ids": [job_id]}
    assert s.get_job(job_id).location is Location.HOT  # type: ignore[union-attr]
