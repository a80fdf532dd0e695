"""The seed's story over HTTP: a job with a malformed payload dies as FatalError, an operator
inspects it, a bad fix is refused with field errors, the good fix resurrects it, the worker
archives it, and the audit log shows every step with the actor."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, Field

from chokaq import ChokaQ
from chokaq.api import create_api
from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import Location
from tests.api.helpers import HEADERS, failed_total, make_app, run_worker_until


class Email(BaseModel):
    to: str = Field(pattern=r"^[^@\s]+@[^@\s]+$")
    subject: str
    body: str


@pytest.fixture
def story_app(db_url: str) -> Iterator[tuple[ChokaQ, list[Any]]]:
    app = make_app(db_url)
    sent: list[Any] = []

    @app.job("email_v1", queue="notifications", payload=Email)
    def send(email: Email) -> None:
        sent.append(email)

    try:
        yield app, sent
    finally:
        app.close()


def test_edit_and_resurrect_story(story_app: tuple[ChokaQ, list[Any]]) -> None:
    app, sent = story_app
    ops = HEADERS["operator"]
    storage = app.storage
    # The producer bypassed validation: "body" is missing (the seed's missing-comma JSON would not
    # even be stored; this is the malformed payload that JSON accepts).
    job_id, _ = storage.enqueue(
        EnqueueRequest(
            type="email_v1",
            queue="notifications",
            payload='{"to": "user@example.com", "subject": "Welcome!"}',
            created_by="signup-service",
        )
    )

    def where() -> Location | None:
        rec = storage.get_job(job_id)
        return rec.location if rec else None

    run_worker_until(app, lambda: where() is Location.DLQ, concurrency=2)
    assert sent == []
    assert failed_total(storage, "notifications") == 1

    with TestClient(create_api(app)) as client:
        # 1. The inspector: every field, the full error, and the payload schema for the editor.
        r = client.get(f"/api/dlq/{job_id}", headers=HEADERS["viewer"])
        assert r.status_code == 200, r.text
        dead = r.json()
        assert dead["failure_reason"] == "FatalError"
        assert dead["location"] == "dlq"
        assert dead["attempt_count"] == 1
        assert "body" in dead["error_details"] and "Field required" in dead["error_details"]
        assert "Traceback" in dead["error_details"]
        assert dead["payload"] == {"to": "user@example.com", "subject": "Welcome!"}
        assert dead["payload_schema"]["properties"].keys() == {"to", "subject", "body"}
        assert dead["worker_id"] and dead["failed_at_utc"] and dead["created_by"] == "signup-service"

        # 2. A fix that is still wrong: 422 with field errors, nothing stored.
        r = client.patch(
            f"/api/dlq/{job_id}", headers=ops, json={"payload": {"to": "not-an-address", "subject": "Welcome!"}}
        )
        assert r.status_code == 422, r.text
        err = r.json()
        assert err["error"] == "payload_invalid"
        locs = {tuple(e["loc"]) for e in err["detail"]}
        assert ("body", "payload", "body") in locs and ("body", "payload", "to") in locs
        assert all(e["msg"] for e in err["detail"])
        # The seed's missing comma, typed into the editor as text.
        r = client.patch(
            f"/api/dlq/{job_id}",
            headers=ops,
            json={"payload_text": '{"to": "user@example.com", "subject": "Welcome!" "body": "Hello, World!"}'},
        )
        assert r.status_code == 422
        assert r.json()["detail"][0]["loc"] == ["body", "payload_text"]
        assert "not valid JSON" in r.json()["detail"][0]["msg"]
        # Only payload, tags and priority are editable.
        r = client.patch(f"/api/dlq/{job_id}", headers=ops, json={"queue": "elsewhere"})
        assert r.status_code == 422 and r.json()["error"] == "validation_error"
        assert storage.get_job(job_id).payload == '{"to": "user@example.com", "subject": "Welcome!"}'  # type: ignore[union-attr]

        # 3. Mark it reviewed (stays in the DLQ).
        r = client.patch(f"/api/dlq/{job_id}", headers=ops, json={"tags": "reviewed"})
        assert r.status_code == 200, r.text
        assert r.json()["location"] == "dlq" and r.json()["tags"] == "reviewed"

        # 4. Edit + resurrect in one move.
        fixed = {"to": "user@example.com", "subject": "Welcome!", "body": "Hello, World!"}
        r = client.post(
            f"/api/dlq/{job_id}/resurrect",
            headers=ops,
            json={"payload": fixed, "tags": "reviewed,fixed-payload", "priority": 30},
        )
        assert r.status_code == 200, r.text
        hot = r.json()
        assert hot["location"] == "hot" and hot["status"] == "Pending"
        assert hot["attempt_count"] == 0 and hot["priority"] == 30
        assert hot["payload"] == fixed and hot["tags"] == "reviewed,fixed-payload"
        assert hot["last_modified_by"] == "ops@example.com"
        assert failed_total(storage, "notifications") == 0

    # 5. The worker runs it again, this time to the archive.
    run_worker_until(app, lambda: where() is Location.ARCHIVE, concurrency=2)
    assert [m.body for m in sent] == ["Hello, World!"]

    with TestClient(create_api(app)) as client:
        r = client.get(f"/api/jobs/{job_id}", headers=HEADERS["viewer"])
        assert r.status_code == 200 and r.json()["location"] == "archive"
        stats = client.get("/api/stats", headers=HEADERS["viewer"]).json()
        q = next(s for s in stats["queues"] if s["queue"] == "notifications")
        assert (q["succeeded_total"], q["failed_total"], q["dlq_size"]) == (1, 0, 0)

        # 6. The audit trail, newest first, with the actor and the before/after of each change.
        r = client.get("/api/audit", params={"job_id": job_id}, headers=HEADERS["viewer"])
        assert r.status_code == 200
        items = r.json()["items"]
        assert [(i["action"], i["actor"], i["role"]) for i in items] == [
            ("dlq.resurrect", "ops@example.com", "operator"),
            ("dlq.edit", "ops@example.com", "operator"),
        ]
        resurrect = items[0]["details"]
        assert resurrect["failure_reason"] == "FatalError"
        assert json.loads(resurrect["payload"]["after"]) == fixed
        assert resurrect["priority"]["after"] == 30
        assert items[1]["details"]["tags"] == {"before": None, "after": "reviewed"}
        assert all(i["job_ids"] == [job_id] for i in items)
