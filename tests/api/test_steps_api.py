"""The step journal through the API: a job's own read lists its steps (lists do not), resurrect
resumes or starts from scratch (a payload edit clears the journal unless keep_steps), each choice
audited, bad choices refused with nothing moved; purge and retention take the journal with the job."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select, update

from chokaq import ChokaQ
from chokaq.domain.states import FailureReason
from chokaq.storage import Actor, AdminStore
from chokaq.storage.schema import audit_log, job_steps, jobs_dlq
from chokaq.storage.steps import finish_step, load_steps, start_step
from tests.api.helpers import HEADERS, enqueue, run_one

OPS, ADMIN, VIEWER = HEADERS["operator"], HEADERS["admin"], HEADERS["viewer"]


def dead_with_journal(app: ChokaQ, payload: str = '{"order": 1}') -> str:
    """A zombie in the DLQ whose run finished step "charge" and started "email"."""
    s = app.storage
    job_id = enqueue(s, payload=payload)
    rec = run_one(s, job_id, worker="w-crashed")
    assert start_step(s, rec.lease, "charge", again=False)
    assert finish_step(s, rec.lease, "charge", '{"charge":"ch_1"}')
    assert start_step(s, rec.lease, "email", again=False)
    assert s.fail(rec.lease, FailureReason.ZOMBIE, "Zombie detected: heartbeat expired")
    return job_id


def audits(app: ChokaQ) -> list[dict[str, Any]]:
    rows = app.storage.read(lambda c: c.execute(select(audit_log).where(audit_log.c.Action == "dlq.resurrect")).all())
    return [json.loads(r.Details or "{}") | {"actor": r.Actor} for r in rows]


def states(app: ChokaQ, job_id: str) -> list[tuple[str, str]]:
    return [(s.name, s.state) for s in load_steps(app.storage, job_id)]


def test_a_jobs_own_read_shows_its_steps_and_lists_do_not(app: ChokaQ, client: TestClient) -> None:
    job_id = dead_with_journal(app)
    dead = client.get(f"/api/dlq/{job_id}", headers=VIEWER).json()
    assert [(st["name"], st["state"], st["attempt"], st["worker"]) for st in dead["steps"]] == [
        ("charge", "done", 1, "w-crashed"),
        ("email", "started", 1, "w-crashed"),
    ]
    charge, email = dead["steps"]
    assert charge["result"] == {"charge": "ch_1"} and charge["done_utc"].endswith("Z")
    assert email["done_utc"] is None and email["result"] is None and email["started_utc"].endswith("Z")
    assert client.get(f"/api/jobs/{job_id}", headers=VIEWER).json()["steps"] == dead["steps"]
    listed = client.get("/api/dlq", headers=VIEWER).json()["items"]
    assert [j["steps"] for j in listed] == [None]
    # A job without steps: an empty journal.
    plain = enqueue(app.storage)
    assert client.get(f"/api/jobs/{plain}", headers=VIEWER).json()["steps"] == []


def test_resurrect_resumes_by_default_and_audits_the_choice(app: ChokaQ, client: TestClient) -> None:
    job_id = dead_with_journal(app)
    r = client.post(f"/api/dlq/{job_id}/resurrect", headers=OPS)
    assert r.status_code == 200, r.text
    assert [(st["name"], st["state"]) for st in r.json()["steps"]] == [("charge", "done"), ("email", "started")]
    (audit,) = audits(app)
    zombies = audit.pop("zombies")  # for its crash incident (storage/incidents.py)
    assert audit == {"failure_reason": "Zombie", "steps": "resume", "journal_steps": 2, "actor": "ops@example.com"}
    assert [(z["worker"], z["jobs"]) for z in zombies] == [("w-crashed", 1)]


def test_resurrect_from_scratch_clears_the_journal(app: ChokaQ, client: TestClient) -> None:
    job_id = dead_with_journal(app)
    r = client.post(f"/api/dlq/{job_id}/resurrect", headers=OPS, json={"steps": "scratch"})
    assert r.status_code == 200, r.text
    assert r.json()["steps"] == [] and states(app, job_id) == []
    (audit,) = audits(app)
    assert audit["steps"] == "scratch" and audit["steps_cleared"] == 2 and audit["actor"] == "ops@example.com"


def test_a_payload_edit_clears_the_journal_unless_keep_steps(app: ChokaQ, client: TestClient) -> None:
    edited = dead_with_journal(app)
    kept = dead_with_journal(app)
    r = client.post(f"/api/dlq/{edited}/resurrect", headers=OPS, json={"payload": {"order": 2}})
    assert r.status_code == 200, r.text
    assert states(app, edited) == []
    r = client.post(f"/api/dlq/{kept}/resurrect", headers=OPS, json={"payload": {"order": 3}, "keep_steps": True})
    assert r.status_code == 200, r.text
    assert states(app, kept) == [("charge", "done"), ("email", "started")]
    first, second = audits(app)
    assert first["steps"] == "scratch" and first["steps_cleared_by"] == "payload edit" and first["keep_steps"] is False
    assert second["steps"] == "resume" and second["keep_steps"] is True and "steps_cleared" not in second


def test_bad_choices_are_refused_and_nothing_moves(app: ChokaQ, client: TestClient) -> None:
    job_id = dead_with_journal(app)
    for body in ({"steps": "sideways"}, {"steps": "scratch", "keep_steps": True}, {"keep_steps": "yes"}):
        r = client.post(f"/api/dlq/{job_id}/resurrect", headers=OPS, json=body)
        assert r.status_code == 422, (body, r.text)
    r = client.post("/api/dlq/resurrect", headers=OPS, json={"ids": [job_id], "steps": "later"})
    assert r.status_code == 422
    assert app.storage.get_job(job_id).location.value == "dlq"  # type: ignore[union-attr]
    assert states(app, job_id) == [("charge", "done"), ("email", "started")] and audits(app) == []


def test_bulk_resurrect_from_scratch(app: ChokaQ, client: TestClient) -> None:
    a, b = dead_with_journal(app), dead_with_journal(app)
    r = client.post("/api/dlq/resurrect", headers=OPS, json={"ids": [a, b], "steps": "scratch"})
    assert r.status_code == 200 and r.json()["affected"] == 2
    assert states(app, a) == states(app, b) == []
    (audit,) = audits(app)
    assert audit["steps"] == "scratch" and audit["steps_cleared"] == 4


def test_purge_and_retention_take_the_journal_with_the_job(app: ChokaQ, client: TestClient) -> None:
    purged, expired, young = dead_with_journal(app), dead_with_journal(app), dead_with_journal(app)
    r = client.post("/api/dlq/purge", headers=ADMIN, json={"ids": [purged]})
    assert r.status_code == 200 and r.json()["affected"] == 1
    assert states(app, purged) == [] and len(states(app, expired)) == 2
    store = AdminStore(app.storage)
    # Retention: only the jobs it deletes lose their journals.
    old = datetime.now(UTC).replace(tzinfo=None) - timedelta(days=60)
    app.storage.write(lambda c: c.execute(update(jobs_dlq).where(jobs_dlq.c.Id == expired).values(FailedAtUtc=old)))
    cutoff = datetime.now(UTC).replace(tzinfo=None) - timedelta(days=30)
    assert store.purge_dlq_older(cutoff, Actor("system:retention", "admin")) == 1
    assert states(app, expired) == [] and len(states(app, young)) == 2
    left = app.storage.read(lambda c: {r[0] for r in c.execute(select(job_steps.c.JobId)).all()})
    assert left == {young}


def test_job_show_logs_prints_the_journal_as_text(app: ChokaQ, db_url: str) -> None:
    """`chokaq job show ID --logs` (a real subprocess) prints each step beside the attempts and log
    lines: what an operator at a terminal decides a zombie with. A step name is the handler's text:
    a terminal control in it is printed as a visible escape."""
    from tests.acceptance.conftest import run_cli

    s = app.storage
    job_id = enqueue(s)
    rec = run_one(s, job_id, worker="w-crashed")
    assert start_step(s, rec.lease, "charge", again=False)
    assert finish_step(s, rec.lease, "charge", '{"charge":"ch_1"}')
    assert start_step(s, rec.lease, "email\x1b[2J", again=False)
    assert s.fail(rec.lease, FailureReason.ZOMBIE, "Zombie detected: heartbeat expired")
    bare = enqueue(s)

    out = run_cli(db_url, "job", "show", job_id, "--logs")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = lines.index("steps:")
    charge, email = lines[at + 1], lines[at + 2]
    assert charge.startswith("  charge: done · attempt 1 on w-crashed · ") and charge.endswith(' · {"charge": "ch_1"}')
    assert email.startswith("  email\\u001b[2J: started, never confirmed (outcome unknown) · attempt 1 on w-crashed")
    assert "\x1b" not in out.stdout
    assert lines.index("steps:") < lines.index("logs: none")
    # A job without a journal says so; the JSON form carries the same steps.
    assert "steps: none recorded" in run_cli(db_url, "job", "show", bare, "--logs").stdout
    shown = json.loads(run_cli(db_url, "job", "show", job_id).stdout)
    assert [(x["name"], x["state"]) for x in shown["steps"]] == [("charge", "done"), ("email\x1b[2J", "started")]
