"""The schedules' routes: what the list shows, pause / resume / run now, the admin's cron edit, and
bad input refused with a 422 and nothing stored."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from chokaq import ChokaQ
from chokaq.storage import ScheduleStore
from tests.api.helpers import HEADERS
from tests.helpers import wait_for

ADMIN, OPS, VIEWER = HEADERS["admin"], HEADERS["operator"], HEADERS["viewer"]


def declare(app: ChokaQ) -> None:
    @app.job("report_v1", queue="reports")
    def report(payload: dict[str, Any]) -> None: ...

    app.schedule("nightly", "0 3 * * *", job="report_v1", payload={"name": "q3"}, tz="Europe/Oslo")
    app.sync_schedules()


def test_list_pause_resume_run(app: ChokaQ, client: TestClient) -> None:
    declare(app)
    body = client.get("/api/schedules", headers=VIEWER).json()
    assert "source of truth" in body["source_of_truth"] or body["source_of_truth"].startswith("code")
    (s,) = body["items"]
    assert (s["name"], s["cron"], s["cron_in_words"], s["time_zone"]) == (
        "nightly",
        "0 3 * * *",
        "At 03:00 every day",
        "Europe/Oslo",
    )
    assert (s["queue"], s["job_type"], s["is_paused"], s["last_job_id"], s["last_job_outcome"]) == (
        "reports",
        "report_v1",
        False,
        None,
        None,
    )
    next_due = s["next_due_utc"]

    r = client.post("/api/schedules/nightly/pause", headers=OPS)
    assert r.status_code == 200 and r.json()["is_paused"] is True and r.json()["last_modified_by"] == "ops@example.com"
    r = client.post("/api/schedules/nightly/run", headers=OPS)
    assert r.status_code == 200
    job_id = r.json()["job_id"]
    job = client.get(f"/api/jobs/{job_id}", headers=VIEWER).json()
    assert (job["queue"], job["type"], job["payload"]) == ("reports", "report_v1", {"name": "q3"})
    (s,) = client.get("/api/schedules", headers=VIEWER).json()["items"]
    assert (s["last_job_id"], s["last_job_outcome"], s["next_due_utc"]) == (job_id, "Pending", next_due)
    r = client.post("/api/schedules/nightly/resume", headers=OPS)
    assert r.status_code == 200 and r.json()["is_paused"] is False

    actions = [i["action"] for i in client.get("/api/audit", headers=VIEWER).json()["items"]]
    assert actions[:3] == ["schedule.resume", "schedule.run", "schedule.pause"]
    assert client.post("/api/schedules/nope/run", headers=OPS).status_code == 404
    assert client.post("/api/schedules/nightly/pause", headers=VIEWER).status_code == 403


def test_admin_edits_the_cron_and_bad_input_is_a_422_storing_nothing(app: ChokaQ, client: TestClient) -> None:
    declare(app)
    before = ScheduleStore(app.storage).get("nightly")
    for body, field in [
        ({"cron": "61 3 * * *"}, "invalid cron expression"),
        ({"cron": "* *"}, "Wrong number of fields"),
        ({"time_zone": "Mars/Olympus_Mons"}, "unknown time zone"),
        ({}, "nothing to change"),
    ]:
        r = client.patch("/api/schedules/nightly", json=body, headers=ADMIN)
        assert r.status_code == 422 and field in r.json()["detail"], r.text
    for body in [{"cron": 5}, {"cron": "0 3 * * *", "queue": "x"}, {"cron": "x" * 500}]:
        assert client.patch("/api/schedules/nightly", json=body, headers=ADMIN).status_code == 422
    assert ScheduleStore(app.storage).get("nightly") == before
    assert client.get("/api/audit", headers=ADMIN).json()["total"] == 0
    assert client.patch("/api/schedules/nightly", json={"cron": "0 4 * * *"}, headers=OPS).status_code == 403

    r = client.patch("/api/schedules/nightly", json={"cron": "0  4 * * *", "time_zone": "UTC"}, headers=ADMIN)
    assert r.status_code == 200, r.text
    assert (r.json()["cron"], r.json()["time_zone"], r.json()["next_due_utc"][11:19]) == (
        "0 4 * * *",
        "UTC",
        "04:00:00",
    )
    (entry, *_) = client.get("/api/audit", headers=ADMIN).json()["items"]
    assert entry["action"] == "schedule.edit" and entry["details"]["cron"] == {
        "before": "0 3 * * *",
        "after": "0 4 * * *",
    }
    # Code is the source of truth: the next start-up writes its own cron again.
    app.sync_schedules()
    assert ScheduleStore(app.storage).get("nightly").cron == "0 3 * * *"


def test_the_last_jobs_outcome_follows_it(app: ChokaQ, client: TestClient) -> None:
    declare(app)
    job_id = client.post("/api/schedules/nightly/run", headers=OPS).json()["job_id"]
    worker = app.worker(concurrency=1)
    import threading

    t = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    t.start()
    try:
        wait_for(lambda: client.get(f"/api/jobs/{job_id}", headers=VIEWER).json()["location"] == "archive")
    finally:
        worker.stop()
        t.join(30)
    (s,) = client.get("/api/schedules", headers=VIEWER).json()["items"]
    assert s["last_job_outcome"] == "Succeeded"
