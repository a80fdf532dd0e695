"""Route behaviour beyond the story: enqueue, edits and their safety gates, queue controls,
listing, conflicts, and live events."""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi.testclient import TestClient
from pydantic import BaseModel

from chokaq import ChokaQ, FailureReason
from chokaq.api import create_api
from tests.api.helpers import HEADERS, enqueue, make_dead, run_one

OPS, ADMIN, VIEWER = HEADERS["operator"], HEADERS["admin"], HEADERS["viewer"]


class Order(BaseModel):
    order_id: int
    amount: float


def _with_handler(app: ChokaQ) -> None:
    @app.job("order_v1", queue="orders", payload=Order)
    def handle(order: Order) -> None:
        return None


def test_health(client: TestClient, sqlite_url: str, tmp_path: Any) -> None:
    assert client.get("/api/health").json() == {"status": "ok", "db": "ok"}
    broken = ChokaQ(storage_url=f"sqlite:///{tmp_path}/missing-dir/x/none.db", admin={"tokens": {}})
    with TestClient(create_api(broken)) as c:
        r = c.get("/api/health")
        assert r.status_code == 503 and r.json()["status"] == "error"


def test_enqueue_idempotency_and_model_validation(app: ChokaQ) -> None:
    _with_handler(app)
    with TestClient(create_api(app)) as client:
        body = {
            "type": "order_v1",
            "payload": {"order_id": 7, "amount": 9.5},
            "idempotency_key": "order-7",
            "tags": "web",
            "priority": 20,
        }
        r1 = client.post("/api/jobs", headers=OPS, json=body)
        assert r1.status_code == 201 and r1.json()["created"] is True
        r2 = client.post("/api/jobs", headers=OPS, json=body)
        assert r2.status_code == 200 and r2.json() == {"id": r1.json()["id"], "created": False}
        job = client.get(f"/api/jobs/{r1.json()['id']}", headers=VIEWER).json()
        assert (job["queue"], job["priority"], job["tags"], job["created_by"]) == (
            "orders",
            20,
            "web",
            "ops@example.com",
        )
        assert job["payload"] == {"order_id": 7, "amount": 9.5} and job["status"] == "Pending"
        bad = client.post("/api/jobs", headers=OPS, json={"type": "order_v1", "payload": {"order_id": "x"}})
        assert bad.status_code == 422 and bad.json()["error"] == "payload_invalid"
        assert {tuple(e["loc"]) for e in bad.json()["detail"]} == {
            ("body", "payload", "order_id"),
            ("body", "payload", "amount"),
        }
        # Unregistered types take any JSON; limits still apply.
        r = client.post("/api/jobs", headers=OPS, json={"type": "free", "payload": [1, "two", None]})
        assert r.status_code == 201
        huge = client.post("/api/jobs", headers=OPS, json={"type": "free", "payload": "x" * 1_000_001})
        assert huge.status_code == 422 and "1000000" in json.dumps(huge.json())
        extra = client.post("/api/jobs", headers=OPS, json={"type": "free", "status": 2})
        assert extra.status_code == 422 and extra.json()["detail"][0]["loc"] == ["body", "status"]
        nul = client.post("/api/jobs", headers=OPS, json={"type": "fr\u0000ee"})
        assert nul.status_code == 422


def test_edit_pending_and_conflicts(app: ChokaQ, client: TestClient) -> None:
    s = app.storage
    job = enqueue(s, queue="e")
    r = client.patch(f"/api/jobs/{job}", headers=OPS, json={"payload": {"n": 2}, "tags": "a,b", "priority": 50})
    assert r.status_code == 200, r.text
    assert (r.json()["payload"], r.json()["tags"], r.json()["priority"]) == ({"n": 2}, "a,b", 50)
    assert client.patch(f"/api/jobs/{job}", headers=OPS, json={}).status_code == 422
    assert client.patch(f"/api/jobs/{job}", headers=OPS, json={"queue": "x"}).status_code == 422
    assert client.patch(f"/api/jobs/{job}", headers=OPS, json={"payload": 1, "payload_text": "1"}).status_code == 422
    # Fetched, then Processing: a worker owns it -> 409, with the reason.
    claimed = s.fetch("w1", 10, ["e"])
    assert [c.id for c in claimed] == [job]
    r = client.patch(f"/api/jobs/{job}", headers=OPS, json={"priority": 1})
    assert r.status_code == 409 and "Fetched" in r.json()["detail"] and r.json()["error"] == "conflict"
    s.start("w1", [claimed[0]])
    r = client.patch(f"/api/jobs/{job}", headers=OPS, json={"priority": 1})
    assert r.status_code == 409 and "Processing" in r.json()["detail"]
    assert client.patch("/api/jobs/does-not-exist", headers=OPS, json={"priority": 1}).status_code == 404
    assert client.get("/api/jobs/does-not-exist", headers=VIEWER).json()["error"] == "not_found"
    # Wrong table: a hot job is not in the DLQ.
    assert client.get(f"/api/dlq/{job}", headers=VIEWER).status_code == 404
    assert client.post(f"/api/dlq/{job}/resurrect", headers=OPS).status_code == 409
    assert client.post("/api/dlq/nope/resurrect", headers=OPS).status_code == 404
    assert client.patch(f"/api/dlq/{job}", headers=OPS, json={"tags": "x"}).status_code == 404
    # Cancelling it is refused too (skipped, not an error).
    assert client.post("/api/jobs/cancel", headers=OPS, json={"ids": [job]}).json() == {
        "cancelled": 0,
        "skipped_ids": [job],
        "was_running": [],
    }


def test_force_is_admin_only_and_audited(app: ChokaQ) -> None:
    _with_handler(app)
    dead = make_dead(app.storage, 1, type="order_v1", queue="orders", payload='{"order_id": 1}')[0]
    with TestClient(create_api(app)) as client:
        bad = {"payload": {"order_id": "one"}}
        assert client.patch(f"/api/dlq/{dead}", headers=OPS, json=bad).status_code == 422
        assert client.patch(f"/api/dlq/{dead}", headers=OPS, json={**bad, "force": True}).status_code == 403
        r = client.patch(f"/api/dlq/{dead}", headers=ADMIN, json={**bad, "force": True})
        assert r.status_code == 200 and r.json()["payload"] == {"order_id": "one"}
        # force skips the model, never the JSON and size checks.
        r = client.patch(f"/api/dlq/{dead}", headers=ADMIN, json={"payload_text": "{nope", "force": True})
        assert r.status_code == 422
        # priority is set when resurrecting, not on a dead job.
        assert client.patch(f"/api/dlq/{dead}", headers=OPS, json={"priority": 3}).status_code == 422
        r = client.post(
            f"/api/dlq/{dead}/resurrect",
            headers=ADMIN,
            json={"force": True, "payload_text": '{"order_id": "still wrong"}'},
        )
        assert r.status_code == 200 and r.json()["payload"] == {"order_id": "still wrong"}
        audit = client.get("/api/audit", headers=VIEWER, params={"job_id": dead}).json()["items"]
        assert [(a["action"], a["details"].get("force")) for a in audit] == [
            ("dlq.resurrect", True),
            ("dlq.edit", True),
        ]
        assert client.get("/api/audit", headers=VIEWER, params={"actor": "ops@example.com"}).json()["total"] == 0


def test_queue_controls(app: ChokaQ, client: TestClient) -> None:
    r = client.patch("/api/queues/mail", headers=OPS, json={"paused": True})
    assert r.status_code == 404 and "create" in r.json()["detail"]  # a typo does not create a queue
    assert client.get("/api/queues", headers=VIEWER).json()["items"] == []
    r = client.patch(
        "/api/queues/mail",
        headers=OPS,
        json={"paused": True, "zombie_timeout_seconds": 120, "max_workers": 4, "create": True},
    )
    assert r.status_code == 200, r.text
    assert (r.json()["is_paused"], r.json()["zombie_timeout_seconds"], r.json()["max_workers"]) == (True, 120, 4)
    # Below 3x Execution.HeartbeatIntervalMax (12 s -> 36 s): refused.
    r = client.patch("/api/queues/mail", headers=OPS, json={"zombie_timeout_seconds": 35})
    assert r.status_code == 422 and "HeartbeatIntervalMax" in r.json()["detail"]
    r = client.patch("/api/queues/mail", headers=OPS, json={"zombie_timeout_seconds": None, "max_workers": None})
    assert (r.json()["zombie_timeout_seconds"], r.json()["max_workers"], r.json()["is_paused"]) == (None, None, True)
    assert client.patch("/api/queues/mail", headers=OPS, json={}).status_code == 422
    assert client.patch("/api/queues/mail", headers=OPS, json={"is_active": False}).status_code == 422
    names = [q["name"] for q in client.get("/api/queues", headers=VIEWER).json()["items"]]
    assert "mail" in names
    audit = client.get("/api/audit", headers=VIEWER).json()["items"]
    assert [a["details"] for a in audit] == [
        {"queue": "mail", "zombie_timeout_seconds": None, "max_workers": None},
        {"queue": "mail", "paused": True, "zombie_timeout_seconds": 120, "max_workers": 4},
    ]
    # Paused queues are not fetched.
    enqueue(app.storage, queue="mail")
    assert app.storage.fetch("w", 10) == []


def test_listing_filters_sort_and_paging(app: ChokaQ, client: TestClient) -> None:
    s = app.storage
    for i in range(5):
        enqueue(s, type="a", queue="q1", priority=i, tags=f"batch-{i % 2}")
    enqueue(s, type="b", queue="q2")
    run_one(s, enqueue(s, type="c", queue="q3"))
    r = client.get(
        "/api/jobs",
        headers=VIEWER,
        params={"queue": "q1", "sort": "priority", "desc": "false", "page_size": 2, "page": 2},
    )
    body = r.json()
    assert (body["total"], body["page"], body["page_size"]) == (5, 2, 2)
    assert [j["priority"] for j in body["items"]] == [2, 3]
    assert client.get("/api/jobs", headers=VIEWER, params={"tag": "batch-1"}).json()["total"] == 2
    assert client.get("/api/jobs", headers=VIEWER, params={"status": "Processing"}).json()["items"][0]["type"] == "c"
    assert client.get("/api/jobs", headers=VIEWER, params={"search": "B"}).json()["total"] >= 1
    assert client.get("/api/jobs", headers=VIEWER, params={"from": "2999-01-01T00:00:00Z"}).json()["total"] == 0
    assert client.get("/api/jobs", headers=VIEWER, params={"to": "2999-01-01T00:00:00+02:00"}).json()["total"] == 7
    for bad in (
        {"sort": "Payload; DROP TABLE x"},
        {"page_size": 1001},
        {"page": 0},
        {"status": "Done"},
        {"location": "dlq"},
        {"from": "yesterday"},
    ):
        r = client.get("/api/jobs", headers=VIEWER, params=bad)
        assert r.status_code == 422, bad
        assert set(r.json()) == {"error", "detail"}
    make_dead(s, 2, queue="dq", reason=FailureReason.ZOMBIE, details="heartbeat expired xyz")
    make_dead(s, 1, queue="dq", details="other")
    assert client.get("/api/dlq", headers=VIEWER, params={"failure_reason": "Zombie"}).json()["total"] == 2
    assert client.get("/api/dlq", headers=VIEWER, params={"failure_reason": "2"}).json()["total"] == 2
    assert client.get("/api/dlq", headers=VIEWER, params={"search": "XYZ"}).json()["total"] == 2
    assert client.get("/api/dlq", headers=VIEWER, params={"failure_reason": "nah"}).status_code == 422
    page = client.get("/api/dlq", headers=VIEWER, params={"sort": "reason", "desc": "true"}).json()
    assert [j["failure_reason"] for j in page["items"]] == ["FatalError", "Zombie", "Zombie"]
    assert client.get("/api/jobs", headers=VIEWER, params={"location": "archive"}).json()["total"] == 0


def test_meta_lists_handlers(app: ChokaQ) -> None:
    _with_handler(app)
    with TestClient(create_api(app)) as client:
        meta = client.get("/api/meta", headers=VIEWER).json()
        assert meta["role"] == "viewer" and meta["dev_open"] is False
        assert meta["handlers"] == [
            {"type": "order_v1", "queue": "orders", "payload_schema": Order.model_json_schema()}
        ]


def test_mutations_publish_events_and_recent_endpoint(app: ChokaQ, client: TestClient) -> None:
    t0 = time.time() - 0.001
    dead = make_dead(app.storage, 1)[0]
    client.post(f"/api/dlq/{dead}/resurrect", headers=OPS)
    client.patch("/api/queues/default", headers=OPS, json={"paused": False})
    r = client.get("/api/events/recent", headers=VIEWER, params={"after": t0})
    assert r.status_code == 200
    kinds = [(e["kind"], e.get("actor")) for e in r.json()["events"]]
    assert ("job.resurrected", "ops@example.com") in kinds and ("queue.changed", "ops@example.com") in kinds
    later = client.get("/api/events/recent", headers=VIEWER, params={"after": r.json()["now"]}).json()
    assert all(e["at"] > r.json()["now"] for e in later["events"])


def test_sse_replays_and_ticks_stats(app: ChokaQ, client: TestClient) -> None:
    t0 = time.time() - 0.001
    marker = app.bus.publish("job.updated", id="sse-marker", queue="q")
    enqueue(app.storage, queue="sse")
    with client.stream("GET", "/api/events", headers=VIEWER, params={"after": t0, "max_events": 2}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        text = "".join(r.iter_text())
    blocks = [b for b in text.split("\n\n") if b.startswith(("id:", "data:"))]
    events = [json.loads(next(line[6:] for line in b.splitlines() if line.startswith("data: "))) for b in blocks]
    # The SSE id is the event feed's cursor (tests/acceptance/test_event_feed_processes.py), never
    # this process's clock.
    assert events[0]["id"] == "sse-marker" and f"id: {marker.at!r}" not in blocks[0]
    tick = events[-1]
    assert tick["kind"] == "stats.updated"
    assert tick["queues"]["sse"]["pending"] == 1 and tick["totals"]["pending"] >= 1
    # A Last-Event-ID that is an event time (from before the feed) resumes after the given event.
    with client.stream(
        "GET", "/api/events", headers={**VIEWER, "Last-Event-ID": repr(marker.at)}, params={"max_events": 1}
    ) as r:
        first = "".join(r.iter_text())
    assert "sse-marker" not in first and "stats.updated" in first


def test_stats_shape(app: ChokaQ, client: TestClient) -> None:
    enqueue(app.storage, queue="s1")
    make_dead(app.storage, 2, queue="s2", type="boom")
    st = client.get("/api/stats", headers=VIEWER).json()
    assert st["totals"]["pending"] == 1 and st["totals"]["dlq_size"] == 2 and st["totals"]["failed_total"] == 2
    assert st["top_errors"][0]["type"] == "boom" and st["top_errors"][0]["count"] == 2
    assert st["rates"]["1m"]["failed"] == 2 and set(st["rates"]) == {"1m", "5m", "15m"}
    s1 = next(q for q in st["queues"] if q["queue"] == "s1")
    assert s1["oldest_pending_lag_seconds"] is not None and s1["pending"] == 1
