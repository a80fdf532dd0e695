"""Real worker processes, killed with SIGKILL, then recovered by the sweep."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import FailureReason, JobStatus, Location
from chokaq.storage import Storage
from tests.acceptance.conftest import run_cli
from tests.helpers import counts, wait_for


def open_storage(db_url: str) -> Storage:
    s = Storage(db_url)
    s.upgrade()
    return s


def starts(record: Path) -> Counter[str]:
    if not record.exists():
        return Counter()
    return Counter(line.split()[1] for line in record.read_text().splitlines() if line.startswith("start "))


def sweep(db_url: str) -> dict[str, int]:
    out = run_cli(db_url, "sweep")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_sigkill_while_a_handler_runs_leaves_a_zombie_for_the_sweep(db_url: str, tmp_path: Path, workers: Any) -> None:
    s = open_storage(db_url)
    job_id, _ = s.enqueue(EnqueueRequest(type="slow", payload='{"seconds": 60}'))
    record = tmp_path / "record.txt"
    proc = workers(db_url, record)
    wait_for(lambda: starts(record)[job_id] == 1)
    # Alive and heartbeating: a sweep after the zombie timeout leaves it alone.
    first = s.get_job(job_id)
    wait_for(lambda: (j := s.get_job(job_id)) and j.heartbeat_utc > first.heartbeat_utc)  # type: ignore[union-attr, operator]
    assert sweep(db_url) == {"recovered": 0, "archived": 0}
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert s.get_job(job_id).status == JobStatus.PROCESSING  # type: ignore[union-attr]
    results = []

    def swept() -> bool:
        results.append(sweep(db_url))
        return results[-1]["archived"] == 1

    wait_for(swept, timeout=30, interval=0.2)
    assert all(r == {"recovered": 0, "archived": 0} for r in results[:-1])
    job = s.get_job(job_id)
    assert job is not None and job.location is Location.DLQ
    assert job.failure_reason == FailureReason.ZOMBIE and "heartbeat expired" in (job.error_details or "")
    assert counts(s) == {"archive": 0, "dlq": 1}
    shown = json.loads(run_cli(db_url, "job", "show", job_id).stdout)
    assert shown["failure_reason"] == "Zombie"
    # The attempt the crash cut short is on the record, with the worker that was running it.
    (lost,) = shown["attempts"]
    assert (lost["attempt"], lost["outcome"], lost["reason"]) == (1, "worker lost", "Zombie")
    assert lost["worker"] == job.worker_id and lost["started_utc"] and "heartbeat expired" in lost["message"]


def test_sigkill_with_fetched_jobs_in_the_buffer(db_url: str, tmp_path: Path, workers: Any) -> None:
    s = open_storage(db_url)
    blocker, _ = s.enqueue(EnqueueRequest(type="slow", payload='{"seconds": 60}', priority=100))
    waiting = [s.enqueue(EnqueueRequest(type="record"))[0] for _ in range(5)]
    record = tmp_path / "record.txt"
    # One slot: the blocker runs, the five others sit Fetched in the prefetch buffer.
    proc = workers(db_url, record, "--concurrency", "1")
    wait_for(lambda: starts(record)[blocker] == 1)
    wait_for(lambda: counts(s).get("fetched") == 5)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert not any(starts(record)[j] for j in waiting)

    total = {"recovered": 0, "archived": 0}

    def swept() -> bool:
        r = sweep(db_url)
        total["recovered"] += r["recovered"]
        total["archived"] += r["archived"]
        return total["recovered"] == 5 and total["archived"] == 1

    wait_for(swept, timeout=30, interval=0.2)
    for job_id in waiting:
        job = s.get_job(job_id)
        assert job is not None and job.status == JobStatus.PENDING and job.worker_id is None
        assert job.attempt_count == 0  # never started: recovery is a safe retry
    # Another worker runs each exactly once.
    workers(db_url, record)
    wait_for(lambda: counts(s).get("archive") == 5, timeout=30)
    seen = starts(record)
    assert all(seen[j] == 1 for j in waiting)
    assert seen[blocker] == 1  # the zombie is not re-run: it waits in the DLQ for a human
    for job_id in waiting:
        assert s.get_job(job_id).attempt_count == 1  # type: ignore[union-attr]


def test_sigterm_is_graceful(db_url: str, tmp_path: Path, workers: Any) -> None:
    s = open_storage(db_url)
    job_id, _ = s.enqueue(EnqueueRequest(type="slow", payload='{"seconds": 60}'))
    others = [s.enqueue(EnqueueRequest(type="record", delay_seconds=0))[0] for _ in range(3)]
    record = tmp_path / "record.txt"
    proc = workers(db_url, record, "--concurrency", "1", CHOKAQ_EXECUTION__SHUTDOWN_GRACE="0.2")
    wait_for(lambda: starts(record)[job_id] == 1)
    wait_for(lambda: counts(s).get("fetched") == 3)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    # The cooperative slow handler stopped and was rescheduled; the buffer went back to Pending.
    assert counts(s) == {"pending": 4, "archive": 0, "dlq": 0}
    assert s.get_job(job_id).attempt_count == 0  # type: ignore[union-attr]
    assert all(s.get_job(j).status == JobStatus.PENDING for j in others)  # type: ignore[union-attr]
