"""A worker process killed with SIGKILL mid-job: the zombie keeps the logs and progress its
heartbeat last wrote (issue 30, job logs)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import FailureReason, Location
from tests.acceptance.conftest import run_cli
from tests.acceptance.test_crash import open_storage, starts, sweep
from tests.helpers import wait_for


def test_a_zombie_keeps_the_logs_its_heartbeat_last_wrote(db_url: str, tmp_path: Path, workers: Any) -> None:
    s = open_storage(db_url)
    job_id, _ = s.enqueue(EnqueueRequest(type="chatty_then_stuck"))
    record = tmp_path / "record.txt"
    proc = workers(db_url, record)
    wait_for(lambda: starts(record)[job_id] == 1)
    # Nothing reaches the row but by the heartbeat: wait for the tick that carries the lines.
    wait_for(lambda: "about to wait" in (((j := s.get_job(job_id)) and j.logs) or ""))
    before = s.get_job(job_id)
    assert before is not None and before.location is Location.HOT and before.progress is not None
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    wait_for(lambda: sweep(db_url)["archived"] == 1, timeout=30, interval=0.2)
    job = s.get_job(job_id)
    assert job is not None and job.location is Location.DLQ and job.failure_reason == FailureReason.ZOMBIE
    assert job.logs == before.logs and job.progress == before.progress  # what was last written, moved as is

    shown = json.loads(run_cli(db_url, "job", "show", job_id).stdout)
    logs = shown["logs"]
    assert logs["attempt"] == 1 and logs["worker"] == job.worker_id and logs["dropped"] == 0
    assert [(line["level"], line["message"]) for line in logs["lines"]] == [
        *(("INFO", f"step {i} done") for i in range(5)),
        ("WARNING", "about to wait at postgres://u:***@db/x"),  # redacted as error text is
    ]
    assert logs["lines"][0]["fields"] == {"step": 0} and logs["lines"][5]["logger"] == "crashapp.chatty"
    assert shown["progress"]["done"] == 5 and shown["progress"]["total"] == 10
    assert shown["progress"]["note"] == "half way"
    (lost,) = shown["attempts"]
    assert lost["outcome"] == "worker lost"
