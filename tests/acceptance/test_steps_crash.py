"""Zombies with evidence: a real worker running a three-step handler (tests/apps/crashapp.py) is
SIGKILLed inside step two, or between steps one and two; the DLQ row shows the journal; a resume
runs only what had not finished, a from-scratch resurrect runs everything, and the audit log
records the choice and who made it."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import select

from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import FailureReason, Location
from chokaq.storage import Storage
from chokaq.storage.schema import audit_log
from tests.acceptance.conftest import run_cli
from tests.acceptance.test_crash import open_storage, sweep
from tests.helpers import wait_for


def lines(record: Path, job_id: str) -> list[str]:
    if not record.exists():
        return []
    return [ln.split()[0] for ln in record.read_text().splitlines() if ln.split()[1] == job_id]


def effects(record: Path, job_id: str) -> Counter[str]:
    return Counter(w.removeprefix("effect:") for w in lines(record, job_id) if w.startswith("effect:"))


def killed_into_the_dlq(s: Storage, db_url: str, record: Path, workers: Any, job_id: str, mark: str) -> dict[str, Any]:
    """Run the job on a real worker, SIGKILL it once the handler reached ``mark``, sweep the zombie
    into the DLQ; the job as ``chokaq dlq show`` prints it."""
    proc = workers(db_url, record)
    wait_for(lambda: mark in lines(record, job_id), timeout=30)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    wait_for(lambda: sweep(db_url)["archived"] == 1, timeout=30, interval=0.2)
    job = s.get_job(job_id)
    assert job is not None and job.location is Location.DLQ and job.failure_reason == FailureReason.ZOMBIE
    out = run_cli(db_url, "dlq", "show", job_id)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def resurrect(db_url: str, job_id: str, *extra: str) -> None:
    out = run_cli(db_url, "dlq", "resurrect", job_id, "--yes", "--actor", "ops@example.com", *extra)
    assert out.returncode == 0, out.stderr


def resurrect_audit(s: Storage) -> list[tuple[str, dict[str, Any]]]:
    """Each resurrect's actor and details; the zombie it took out (recorded for its crash incident,
    storage/incidents.py) checked and left out."""
    rows = s.read(lambda c: c.execute(select(audit_log).where(audit_log.c.Action == "dlq.resurrect")).all())
    out = []
    for r in rows:
        details = json.loads(r.Details or "{}")
        assert [z["jobs"] for z in details.pop("zombies")] == [1]
        out.append((r.Actor, details))
    return out


def finished(s: Storage, job_id: str) -> bool:
    job = s.get_job(job_id)
    return job is not None and job.location is Location.ARCHIVE


def test_killed_inside_step_two_resumes_after_step_one_and_the_handler_resolves_step_two(
    db_url: str, tmp_path: Path, workers: Any
) -> None:
    s = open_storage(db_url)
    release = tmp_path / "release"
    job_id, _ = s.enqueue(EnqueueRequest(type="three_steps", payload=json.dumps({"release": str(release)})))
    record = tmp_path / "record.txt"
    dead = killed_into_the_dlq(s, db_url, record, workers, job_id, "inside:two")
    # The evidence: step one done (with its result), step two started and never confirmed, no step three.
    steps = {st["name"]: st for st in dead["steps"]}
    assert list(steps) == ["one", "two"]
    assert steps["one"]["state"] == "done" and steps["one"]["result"] == "one at attempt 1"
    assert steps["one"]["done_utc"] and steps["one"]["attempt"] == 1
    assert steps["two"]["state"] == "started" and steps["two"]["done_utc"] is None
    assert steps["one"]["worker"] == steps["two"]["worker"] == s.get_job(job_id).worker_id  # type: ignore[union-attr]
    assert effects(record, job_id) == {"one": 1}

    release.touch()
    resurrect(db_url, job_id)  # resume: the default when a journal exists
    workers(db_url, record)
    wait_for(lambda: finished(s, job_id), timeout=30)
    assert effects(record, job_id) == {"one": 1, "two": 1, "three": 1}  # step one ran once across both runs
    seen = lines(record, job_id)
    # Step two was unknown: the handler checked (no effect), ran it again, and only then step three.
    assert seen.index("resolved:two:again") < seen.index("effect:two") < seen.index("effect:three")
    assert resurrect_audit(s) == [
        ("ops@example.com", {"steps": "resume", "journal_steps": 2}),
    ]
    shown = json.loads(run_cli(db_url, "job", "show", job_id).stdout)
    assert [(st["name"], st["state"]) for st in shown["steps"]] == [("one", "done"), ("two", "done"), ("three", "done")]
    assert shown["steps"][0]["worker"] != shown["steps"][2]["worker"]  # one from the first run, three from the second


def test_killed_between_steps_one_and_two_resumes_with_step_two(db_url: str, tmp_path: Path, workers: Any) -> None:
    s = open_storage(db_url)
    release = tmp_path / "release"
    payload = json.dumps({"release": str(release), "pause": "between"})
    job_id, _ = s.enqueue(EnqueueRequest(type="three_steps", payload=payload))
    record = tmp_path / "record.txt"
    dead = killed_into_the_dlq(s, db_url, record, workers, job_id, "between:one-two")
    assert [(st["name"], st["state"]) for st in dead["steps"]] == [("one", "done")]

    release.touch()
    resurrect(db_url, job_id)
    workers(db_url, record)
    wait_for(lambda: finished(s, job_id), timeout=30)
    assert effects(record, job_id) == {"one": 1, "two": 1, "three": 1}
    assert not any(w.startswith("resolved:") for w in lines(record, job_id))  # step two was simply not reached


def test_from_scratch_runs_every_step_again_and_the_audit_says_so(db_url: str, tmp_path: Path, workers: Any) -> None:
    s = open_storage(db_url)
    release = tmp_path / "release"
    job_id, _ = s.enqueue(EnqueueRequest(type="three_steps", payload=json.dumps({"release": str(release)})))
    record = tmp_path / "record.txt"
    killed_into_the_dlq(s, db_url, record, workers, job_id, "inside:two")
    release.touch()
    resurrect(db_url, job_id, "--steps", "scratch")
    workers(db_url, record)
    wait_for(lambda: finished(s, job_id), timeout=30)
    assert effects(record, job_id) == {"one": 2, "two": 1, "three": 1}
    assert not any(w.startswith("resolved:") for w in lines(record, job_id))  # the journal was cleared
    (audit,) = resurrect_audit(s)
    assert audit[0] == "ops@example.com"
    assert audit[1] == {"steps": "scratch", "journal_steps": 2, "steps_cleared": 2}
