"""Worker presence with real processes (docs/workers.md): three workers record themselves live with
the jobs each holds; one SIGKILLed shows as lost with its zombies after the zombie timeout and a
sweep; one stopped with SIGTERM shows as stopped; the third stays live."""

from __future__ import annotations

import json
import os
import signal
import socket
from collections import Counter
from pathlib import Path
from typing import Any

from chokaq.domain.models import EnqueueRequest
from tests.acceptance.conftest import run_cli
from tests.acceptance.test_crash import open_storage
from tests.helpers import wait_for

# A zombie timeout with room for a loaded machine (the third worker must never look silent to the
# sweep); a short grace, so a SIGTERM hands the running job back at once.
ENV = {"CHOKAQ_RECOVERY__PROCESSING_ZOMBIE_TIMEOUT": "3", "CHOKAQ_EXECUTION__SHUTDOWN_GRACE": "0.2"}


def started_by(record: Path) -> dict[str, int]:
    """pid -> jobs started, from the handlers' own record."""
    if not record.exists():
        return {}
    return dict(Counter(line.split()[2] for line in record.read_text().splitlines() if line.startswith("start ")))


def listed(db_url: str, *args: str) -> Any:
    out = run_cli(db_url, "workers", "--json", *args, **ENV)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_killed_worker_shows_as_lost_with_its_zombies_and_a_stopped_one_as_stopped(
    db_url: str, tmp_path: Path, workers: Any
) -> None:
    s = open_storage(db_url)
    # One job per worker: each serves a queue of its own.
    jobs = [s.enqueue(EnqueueRequest(type="slow", queue=f"q{i}", payload='{"seconds": 120}'))[0] for i in range(3)]
    record = tmp_path / "record.txt"
    procs = [workers(db_url, record, "--concurrency", "1", "--queues", f"q{i}", **ENV) for i in range(3)]
    pids = {str(p.pid) for p in procs}
    wait_for(lambda: sum(started_by(record).values()) == 3, timeout=60)
    by_pid = started_by(record)
    assert set(by_pid) == pids and set(by_pid.values()) == {1}  # one job each

    # All three live, each holding the job it runs, as the CLI lists them.
    def all_live_and_holding() -> Any:
        rows = {str(w["pid"]): w for w in listed(db_url)}
        ok = set(rows) == pids and all(w["state"] == "live" and w["holding"] == 1 for w in rows.values())
        return rows if ok else None

    rows = wait_for(all_live_and_holding, timeout=60, interval=0.2)
    assert all(w["host"] == socket.gethostname() and w["concurrency"] == 1 for w in rows.values())
    assert sorted(w["queues"][0] for w in rows.values()) == ["q0", "q1", "q2"]
    killed, stopped, alive = procs
    killed_id = rows[str(killed.pid)]["worker_id"]
    (killed_job,) = listed(db_url, killed_id)["held_jobs"]
    assert killed_job["id"] in jobs and killed_job["status"] == "Processing"

    stopped.send_signal(signal.SIGTERM)
    assert stopped.wait(30) == 0
    killed.send_signal(signal.SIGKILL)
    killed.wait(10)

    # Sweeps until the silence passes the zombie timeout: the job goes to the DLQ as a zombie and
    # the worker is marked lost, both against the killed worker's id.
    def lost() -> Any:
        assert run_cli(db_url, "sweep", **ENV).returncode == 0
        w = next(w for w in listed(db_url) if w["worker_id"] == killed_id)
        return w if w["state"] == "lost" and w["zombies"] == 1 else None

    gone = wait_for(lost, timeout=90, interval=0.5)
    assert gone["holding"] == 0 and gone["stopped_at_utc"]
    detail = listed(db_url, killed_id)
    assert [j["id"] for j in detail["zombie_jobs"]] == [killed_job["id"]] and detail["held_jobs"] == []
    job = s.get_job(killed_job["id"])
    assert job is not None and job.worker_id == killed_id and job.failure_reason is not None

    rows = {str(w["pid"]): w for w in listed(db_url)}
    assert rows[str(stopped.pid)]["state"] == "stopped" and rows[str(stopped.pid)]["holding"] == 0
    assert rows[str(alive.pid)]["state"] == "live" and rows[str(alive.pid)]["holding"] == 1
    assert [w["worker_id"] for w in listed(db_url, "--state", "lost")] == [killed_id]
    assert os.getpid() not in {w["pid"] for w in rows.values()}  # three processes of their own
    s.close()
