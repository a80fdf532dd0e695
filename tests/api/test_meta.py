"""GET /api/meta: the vocabulary it serves is the one the API enforces, checked by calling the API.

Each claim of the response is tried against the endpoint it describes: every role's endpoint list
against 403s, every failure reason, status and history window against the filters that take them,
and every limit at its edge (the limit passes, one past it is refused).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from chokaq.api import create_api
from tests.api.helpers import HEADERS, enqueue, make_app, make_dead

WRITE = {"X-ChokaQ-Request": "1"}


@pytest.fixture
def client(sqlite_url: str) -> Iterator[TestClient]:
    app = make_app(sqlite_url)
    enqueue(app.storage)
    make_dead(app.storage, 1)
    try:
        with TestClient(create_api(app)) as c:
            yield c
    finally:
        app.close()


def meta(client: TestClient, role: str = "viewer") -> dict[str, Any]:
    r = client.get("/api/meta", headers=HEADERS[role])
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def call(client: TestClient, endpoint: str, role: str) -> int:
    """Call ``"METHOD /path/{template}"`` as ``role`` with placeholder ids and an empty body: only
    whether the role check let it through matters, not what the call then made of its input."""
    method, template = endpoint.split(" ", 1)
    path = template.replace("{job_id}", "no-such-job").replace("{name}", "no-such-queue")
    if path == "/api/events":
        path += "?max_events=1"  # a stream: end it after one event
    body: dict[str, Any] | None = None if method == "GET" else {}
    return client.request(method, path, headers={**HEADERS[role], **WRITE}, json=body).status_code


def test_meta_needs_a_viewer_like_every_read(client: TestClient) -> None:
    assert client.get("/api/meta").status_code == 401
    assert client.get("/api/meta", headers={"Authorization": "Bearer not-a-token-at-all"}).status_code == 401
    for role in ("viewer", "operator", "admin"):
        m = meta(client, role)
        assert m["role"] == role and m["actor"] == f"{role if role != 'operator' else 'ops'}@example.com"


def test_each_roles_endpoints_are_exactly_what_it_may_call(client: TestClient) -> None:
    roles = meta(client)["roles"]
    assert [r["name"] for r in roles] == ["viewer", "operator", "admin"]
    assert [r["rank"] for r in roles] == sorted(r["rank"] for r in roles)
    every = set(roles[-1]["may"])
    assert {"GET /api/meta", "PATCH /api/queues/{name}", "POST /api/dlq/purge", "POST /api/jobs/cancel"} <= every
    for lower, higher in itertools.pairwise(roles):
        assert set(lower["may"]) < set(higher["may"])  # a higher role may do all a lower one may, and more
    for r in roles:
        for endpoint in sorted(every):
            status = call(client, endpoint, r["name"])
            if endpoint in r["may"]:
                assert status not in (401, 403), (r["name"], endpoint, status)
            else:
                assert status == 403, (r["name"], endpoint, status)


def test_failure_reasons_statuses_and_locations_are_what_the_filters_take(client: TestClient) -> None:
    m = meta(client)
    v = HEADERS["viewer"]
    assert "Zombie" in m["failure_reasons"] and len(set(m["failure_reasons"])) == len(m["failure_reasons"])
    for reason in m["failure_reasons"]:
        assert client.get("/api/dlq", headers=v, params={"failure_reason": reason}).status_code == 200, reason
    assert client.get("/api/dlq", headers=v, params={"failure_reason": "NotAReason"}).status_code == 422
    # The history lists every reason too, in the same order (the charts' stack order).
    assert client.get("/api/stats/history", headers=v).json()["reasons"] == m["failure_reasons"]

    assert m["job_statuses"] == ["Pending", "Fetched", "Processing"]
    for status in m["job_statuses"]:
        assert client.get("/api/jobs", headers=v, params={"status": status}).status_code == 200, status
    assert client.get("/api/jobs", headers=v, params={"status": "Succeeded"}).status_code == 422
    pending = client.get("/api/jobs", headers=v).json()["items"]
    assert {j["status"] for j in pending} <= set(m["job_statuses"])

    assert m["locations"] == ["hot", "archive", "dlq"]
    dead = client.get("/api/dlq", headers=v).json()["items"][0]
    assert dead["location"] in m["locations"] and dead["failure_reason"] in m["failure_reasons"]


def test_the_events_an_action_sends_are_of_the_kinds_meta_lists(client: TestClient) -> None:
    kinds = meta(client)["event_kinds"]
    assert {"job.resurrected", "queue.changed", "stats.updated"} <= set(kinds)
    ops = {**HEADERS["operator"], **WRITE}
    dead = client.get("/api/dlq", headers=HEADERS["viewer"]).json()["items"][0]["id"]
    assert client.post(f"/api/dlq/{dead}/resurrect", headers=ops).status_code == 200
    assert client.patch("/api/queues/default", headers=ops, json={"paused": True}).status_code == 200
    sent = [e["kind"] for e in client.get("/api/events/recent", headers=HEADERS["viewer"]).json()["events"]]
    assert "job.resurrected" in sent and "queue.changed" in sent
    assert set(sent) <= set(kinds)


def test_history_windows_match_the_history_endpoint(client: TestClient) -> None:
    windows = meta(client)["history_windows"]
    assert [w["name"] for w in windows] == ["1h", "6h", "24h", "7d"]
    for w in windows:
        h = client.get("/api/stats/history", headers=HEADERS["viewer"], params={"window": w["name"]}).json()
        assert h["bucket_seconds"] == w["bucket_seconds"]
        assert len(h["buckets"]) * h["bucket_seconds"] == w["seconds"]


def test_limits_hold_at_their_edges(client: TestClient) -> None:
    lim = meta(client)["limits"]
    v, ops = HEADERS["viewer"], {**HEADERS["operator"], **WRITE}

    assert lim["page_size_default"] == client.get("/api/jobs", headers=v).json()["page_size"]
    assert lim["page_sizes"] == sorted(lim["page_sizes"]) and lim["page_sizes"][-1] == lim["page_size_max"]
    for path in ("/api/jobs", "/api/dlq", "/api/audit"):
        assert client.get(path, headers=v, params={"page_size": lim["page_size_max"]}).status_code == 200
        assert client.get(path, headers=v, params={"page_size": lim["page_size_max"] + 1}).status_code == 422

    def cancel(n: int) -> int:
        return client.post("/api/jobs/cancel", headers=ops, json={"ids": [f"x{i}" for i in range(n)]}).status_code

    assert cancel(lim["max_bulk_ids"]) == 200 and cancel(lim["max_bulk_ids"] + 1) == 422

    def bulk(max_jobs: int) -> int:
        body = {"filter": {"queue": "default"}, "dry_run": True, "max_jobs": max_jobs}
        return client.post("/api/dlq/resurrect", headers=ops, json=body).status_code

    assert bulk(lim["max_bulk_ids"]) == 200 and bulk(lim["max_bulk_ids"] + 1) == 422

    def enqueue_as_ops(**fields: Any) -> int:
        return client.post("/api/jobs", headers=ops, json={"type": "t", "payload": {}, **fields}).status_code

    assert enqueue_as_ops(priority=lim["priority_max"]) == 201
    assert enqueue_as_ops(priority=lim["priority_min"]) == 201
    assert enqueue_as_ops(priority=lim["priority_max"] + 1) == 422
    assert enqueue_as_ops(priority=lim["priority_min"] - 1) == 422
    assert enqueue_as_ops(tags="t" * lim["max_tags_len"]) == 201
    assert enqueue_as_ops(tags="t" * (lim["max_tags_len"] + 1)) == 422
    assert enqueue_as_ops(queue="q" * (lim["max_queue_len"] + 1)) == 422
    assert enqueue_as_ops(payload="x" * (lim["max_payload_bytes"] + 1)) == 422

    def queue(field: str, value: int) -> int:
        return client.patch("/api/queues/default", headers=ops, json={field: value}).status_code

    for field in ("max_workers", "zombie_timeout_seconds"):
        assert queue(field, lim[f"{field}_min"]) == 200 and queue(field, lim[f"{field}_max"]) == 200
        assert queue(field, lim[f"{field}_min"] - 1) == 422 and queue(field, lim[f"{field}_max"] + 1) == 422


def test_meta_is_in_the_openapi_schema_with_its_typed_model(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    ok = schema["paths"]["/api/meta"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/ApiMetaOut"}
    fields = schema["components"]["schemas"]["ApiMetaOut"]["properties"]
    wanted = {"role", "actor", "handlers", "dev_open", "roles", "job_statuses", "failure_reasons", "limits"}
    assert wanted <= set(fields)
