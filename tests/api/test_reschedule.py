"""Reschedule a Pending job (move its due time, or run it now) from the operations service, the
API and the CLI: audited with its actor, refused with 409 once a worker owns the job, and racing a
worker's claim with exactly one winner."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from chokaq import ChokaQ, ConflictError, NotFoundError
from chokaq.cli.main import cli
from chokaq.operations.service import Operations
from chokaq.storage import Actor
from tests.api.helpers import HEADERS, enqueue, make_dead

ME = Actor("ops@example.com", "operator")
PARIS = ZoneInfo("Europe/Paris")


def ahead(days: int, tz: ZoneInfo = PARIS) -> datetime:
    """09:00 local, ``days`` from today (inside the 366 days a job may be scheduled ahead)."""
    day = datetime.now(tz) + timedelta(days=days)
    return day.replace(hour=9, minute=0, second=0, microsecond=0)


def utc(at: datetime) -> str:
    return at.astimezone(UTC).replace(tzinfo=None).isoformat()


def due_ids(app: ChokaQ) -> list[str]:
    """The jobs a worker would claim now (claimed, so they are taken out of the way)."""
    return [j.id for j in app.storage.fetch("w", 100)]


def audit(client: TestClient) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = client.get("/api/audit", headers=HEADERS["admin"]).json()["items"]
    return rows


def test_the_service_moves_a_pending_job_later_and_back_to_now(app: ChokaQ) -> None:
    ops = Operations(app)
    job_id = enqueue(app.storage)
    at = ahead(200)  # on the other side of a DST change from today's
    rec = ops.reschedule(ME, job_id, at)
    assert rec.scheduled_at_utc is not None and rec.scheduled_at_utc.isoformat().startswith(utc(at))
    assert rec.last_modified_by == ME.name
    assert due_ids(app) == []
    ops.reschedule(ME, job_id, None)
    assert due_ids(app) == [job_id]


def test_an_at_is_its_utc_instant_and_a_naive_one_is_refused(app: ChokaQ) -> None:
    ops = Operations(app)
    job_id = enqueue(app.storage)
    soon = datetime.now(ZoneInfo("America/New_York")).replace(microsecond=0) + timedelta(days=30)
    rec = ops.reschedule(ME, job_id, soon)
    assert rec.scheduled_at_utc is not None
    assert rec.scheduled_at_utc.replace(microsecond=0) == soon.astimezone(UTC).replace(tzinfo=None)
    with pytest.raises(ValueError, match="timezone-aware"):
        ops.reschedule(ME, job_id, datetime(2027, 1, 1))


def test_a_job_a_worker_owns_or_that_is_gone_is_refused(app: ChokaQ) -> None:
    ops = Operations(app)
    job_id = enqueue(app.storage)
    assert due_ids(app) == [job_id]  # Fetched now
    with pytest.raises(ConflictError, match="no longer Pending"):
        ops.reschedule(ME, job_id, None)
    dead = make_dead(app.storage, 1)[0]
    with pytest.raises(ConflictError, match="dlq"):
        ops.reschedule(ME, dead, None)
    with pytest.raises(NotFoundError):
        ops.reschedule(ME, "01NOPE", None)


def test_the_api_reschedules_audits_and_answers_409_and_422(app: ChokaQ, client: TestClient) -> None:
    job_id = enqueue(app.storage)
    at = ahead(100)
    r = client.post(f"/api/jobs/{job_id}/reschedule", headers=HEADERS["operator"], json={"at": at.isoformat()})
    assert r.status_code == 200, r.text
    assert r.json()["scheduled_at_utc"].startswith(utc(at))
    (row,) = [a for a in audit(client) if a["action"] == "job.reschedule"]
    assert row["actor"] == "ops@example.com" and row["role"] == "operator" and row["job_ids"] == [job_id]
    naive = at.replace(tzinfo=None).isoformat()
    for body in ({"at": naive}, {}, {"now": True, "at": at.isoformat()}, {"at": ahead(400).isoformat()}):
        bad = client.post(f"/api/jobs/{job_id}/reschedule", headers=HEADERS["operator"], json=body)
        assert bad.status_code == 422, (body, bad.text)
    assert client.post(f"/api/jobs/{job_id}/reschedule", headers=HEADERS["operator"], json={"now": True}).is_success
    assert due_ids(app) == [job_id]
    r = client.post(f"/api/jobs/{job_id}/reschedule", headers=HEADERS["operator"], json={"now": True})
    assert r.status_code == 409 and "no longer Pending" in r.json()["detail"]
    assert (
        client.post("/api/jobs/01NOPE/reschedule", headers=HEADERS["operator"], json={"now": True}).status_code == 404
    )


def test_the_api_enqueues_at_a_time(app: ChokaQ, client: TestClient) -> None:
    at = ahead(150)
    r = client.post("/api/jobs", headers=HEADERS["operator"], json={"type": "t", "at": at.isoformat()})
    assert r.status_code == 201, r.text
    rec = app.storage.get_job(r.json()["id"])
    assert rec is not None and rec.scheduled_at_utc is not None
    assert rec.scheduled_at_utc.isoformat().startswith(utc(at))
    naive = {"type": "t", "at": at.replace(tzinfo=None).isoformat()}
    assert client.post("/api/jobs", headers=HEADERS["operator"], json=naive).status_code == 422
    both = {"type": "t", "at": at.isoformat(), "delay_seconds": 5}
    assert client.post("/api/jobs", headers=HEADERS["operator"], json=both).status_code == 422


def test_the_cli_reschedules_with_at_or_now(app: ChokaQ, db_url: str) -> None:
    job_id = enqueue(app.storage)

    def run(*args: str) -> Any:
        return CliRunner().invoke(cli, ["--db", db_url, "job", "reschedule", *args], catch_exceptions=False)

    at = ahead(20)
    r = run(job_id, "--at", at.isoformat(), "--actor", "cli:alice")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["scheduled_at_utc"].startswith(utc(at))
    assert due_ids(app) == []
    assert run(job_id, "--now").exit_code == 0
    assert due_ids(app) == [job_id]
    conflict = run(job_id, "--now")
    assert conflict.exit_code == 1 and "no longer Pending" in conflict.stderr
    for bad in ([job_id], [job_id, "--now", "--at", at.isoformat()], [job_id, "--at", "2027-01-01T00:00"]):
        r = run(*bad)
        assert r.exit_code == 2 and r.stderr.startswith("error: invalid input"), (bad, r.stderr)
    assert run(job_id, "--at", "tomorrow").exit_code == 2


def race(app: ChokaQ, ops: Operations, job_id: str, later: datetime) -> tuple[list[str], list[str]]:
    """A worker's claim and an operator's reschedule, let go at once: what each got."""
    start = threading.Barrier(2)
    claimed: list[str] = []
    outcome: list[str] = []

    def claim() -> None:
        start.wait()
        claimed.extend(j.id for j in app.storage.fetch("w", 10))

    def reschedule() -> None:
        start.wait()
        try:
            ops.reschedule(ME, job_id, later)
            outcome.append("rescheduled")
        except ConflictError:
            outcome.append("conflict")

    threads = [threading.Thread(target=claim), threading.Thread(target=reschedule)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return claimed, outcome


def test_a_reschedule_races_a_workers_claim_and_exactly_one_wins(app: ChokaQ) -> None:
    ops = Operations(app)
    later = datetime.now(UTC) + timedelta(hours=1)
    for _ in range(20):
        job_id = enqueue(app.storage)
        claimed, outcome = race(app, ops, job_id, later)
        rec = app.storage.get_job(job_id)
        assert rec is not None and rec.status is not None
        if outcome == ["rescheduled"]:
            assert claimed == [] and rec.status.name == "PENDING"
        else:
            assert outcome == ["conflict"] and claimed == [job_id] and rec.status.name == "FETCHED"
            app.storage.release("w", [rec.lease])
        ops.cancel(ME, [job_id])  # out of the way for the next round


def test_the_cli_enqueues_at_a_time(app: ChokaQ, db_url: str) -> None:
    at = ahead(10)
    r = CliRunner().invoke(cli, ["--db", db_url, "enqueue", "t", "--at", at.isoformat()], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    rec = app.storage.get_job(r.stdout.strip())
    assert rec is not None and rec.scheduled_at_utc is not None
    assert rec.scheduled_at_utc.isoformat().startswith(utc(at))
    naive = CliRunner().invoke(cli, ["--db", db_url, "enqueue", "t", "--at", "2027-01-01T08:00"])
    assert naive.exit_code == 2 and "timezone-aware" in naive.stderr
