"""Bulk resurrect and purge by ids and by filter (dry run, cap, exact stats), cancel, and the
archive purge in bounded batches."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from chokaq import ChokaQ
from chokaq.api import create_api
from chokaq.domain.states import FailureReason, JobStatus, Location
from tests.api.helpers import HEADERS, enqueue, failed_total, make_app, make_archived, make_dead, run_one

OPS, ADMIN, VIEWER = HEADERS["operator"], HEADERS["admin"], HEADERS["viewer"]


def test_bulk_resurrect_by_filter_dry_run_cap_and_stats(app: ChokaQ, client: TestClient) -> None:
    s = app.storage
    zombies = make_dead(s, 7, queue="mail", type="email_v1", reason=FailureReason.ZOMBIE, details="heartbeat expired")
    fatal = make_dead(s, 3, queue="mail", type="email_v1", reason=FailureReason.FATAL_ERROR)
    other = make_dead(s, 2, queue="sms", type="sms_v1", reason=FailureReason.ZOMBIE)
    assert failed_total(s, "mail") == 10 and failed_total(s, "sms") == 2
    body = {"filter": {"queue": "mail", "failure_reason": "Zombie"}, "max_jobs": 5}

    # Dry run: the count of everything matching, sample ids, nothing moves.
    r = client.post("/api/dlq/resurrect", headers=OPS, json={**body, "dry_run": True})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["dry_run"] is True and out["matched"] == 7 and out["affected"] == 0
    assert set(out["sample_ids"]) <= set(zombies) and len(out["sample_ids"]) == 5
    assert failed_total(s, "mail") == 10

    # The real thing, bound to the preview, stops at max_jobs, oldest failures first.
    r = client.post(
        "/api/dlq/resurrect", headers=OPS, json={**body, "expected_count": out["matched"], "snapshot": out["snapshot"]}
    )
    out = r.json()
    assert (out["matched"], out["affected"], out["dry_run"]) == (7, 5, False)
    assert set(out["sample_ids"]) <= set(zombies)
    assert failed_total(s, "mail") == 10 - 5  # decreases by exactly the number resurrected
    assert failed_total(s, "sms") == 2
    for job_id in out["sample_ids"]:
        rec = s.get_job(job_id)
        assert rec is not None and rec.location is Location.HOT and rec.status is JobStatus.PENDING
        assert rec.attempt_count == 0 and rec.priority == 10 and rec.last_modified_by == "ops@example.com"

    # Filter by number works too; the rest of the zombies come back, fatal ones stay.
    again = {"filter": {"queue": "mail", "failure_reason": 2}, "max_jobs": 1000}
    preview = client.post("/api/dlq/resurrect", headers=OPS, json={**again, "dry_run": True}).json()
    r = client.post(
        "/api/dlq/resurrect",
        headers=OPS,
        json={**again, "expected_count": preview["matched"], "snapshot": preview["snapshot"]},
    )
    assert r.json()["affected"] == 2
    assert failed_total(s, "mail") == 3
    left = client.get("/api/dlq", headers=VIEWER, params={"queue": "mail"}).json()
    assert {j["id"] for j in left["items"]} == set(fatal) and left["total"] == 3
    assert client.get("/api/dlq", headers=VIEWER, params={"queue": "sms"}).json()["total"] == len(other)

    # Audit: one row per bulk call, with every id and the filter.
    audit = client.get("/api/audit", headers=VIEWER).json()["items"]
    bulk = [a for a in audit if a["action"] == "dlq.resurrect"]
    assert [a["job_count"] for a in bulk] == [2, 5]
    assert bulk[1]["details"]["filter"] == {"queue": "mail", "failure_reason": "Zombie"}


def test_bulk_by_ids_reports_skipped(app: ChokaQ, client: TestClient) -> None:
    s = app.storage
    dead = make_dead(s, 3, queue="q")
    pending = enqueue(s, queue="q")
    r = client.post("/api/dlq/resurrect", headers=OPS, json={"ids": [*dead[:2], pending, "nope"]})
    out = r.json()
    assert r.status_code == 200 and out["affected"] == 2 and out["matched"] == 2
    assert sorted(out["skipped_ids"]) == sorted([pending, "nope"])
    assert failed_total(s, "q") == 1


def test_bulk_limits_are_422(client: TestClient) -> None:
    too_many = {"ids": [f"id{i}" for i in range(1001)]}
    assert client.post("/api/dlq/resurrect", headers=OPS, json=too_many).status_code == 422
    assert client.post("/api/dlq/resurrect", headers=OPS, json={"filter": {}, "max_jobs": 1001}).status_code == 422
    both = client.post("/api/dlq/purge", headers=ADMIN, json={"ids": ["a"], "filter": {"queue": "q"}})
    assert both.status_code == 422 and both.json()["error"] == "validation_error"
    neither = client.post("/api/dlq/purge", headers=ADMIN, json={"dry_run": True})
    assert neither.status_code == 422
    bad_reason = client.post(
        "/api/dlq/purge", headers=ADMIN, json={"filter": {"failure_reason": "Sleepy"}, "dry_run": True}
    )
    assert bad_reason.status_code == 422 and "Zombie" in bad_reason.json()["detail"]
    assert (
        client.post(
            "/api/dlq/purge", headers=ADMIN, json={"filter": {"failure_reason": 42}, "dry_run": True}
        ).status_code
        == 422
    )


def test_purge_by_filter_with_dry_run_and_default_cap(app: ChokaQ, client: TestClient) -> None:
    s = app.storage
    make_dead(s, 105, queue="bulk", type="report", details="upstream said: quota exceeded")
    keep = make_dead(s, 2, queue="bulk", type="report", details="disk full")
    before = failed_total(s, "bulk")
    f = {"filter": {"queue": "bulk", "search": "QUOTA"}}
    r = client.post("/api/dlq/purge", headers=ADMIN, json={**f, "dry_run": True})
    assert (r.json()["matched"], r.json()["affected"]) == (105, 0)
    assert len(r.json()["sample_ids"]) == 20
    bound = {"expected_count": 105, "snapshot": r.json()["snapshot"]}
    r = client.post("/api/dlq/purge", headers=ADMIN, json={**f, **bound})  # default max_jobs 100
    assert (r.json()["matched"], r.json()["affected"]) == (105, 100)
    r = client.post("/api/dlq/purge", headers=ADMIN, json={**f, **bound, "expected_count": 5})
    assert (r.json()["matched"], r.json()["affected"]) == (5, 5)
    left = client.get("/api/dlq", headers=VIEWER, params={"queue": "bulk"}).json()
    assert {j["id"] for j in left["items"]} == set(keep)
    # Purging dead jobs does not rewrite history: FailedTotal counts failures that happened.
    assert failed_total(s, "bulk") == before
    purges = [a for a in client.get("/api/audit", headers=VIEWER).json()["items"] if a["action"] == "dlq.purge"]
    assert [a["job_count"] for a in purges] == [5, 100]
    assert purges[0]["actor"] == "admin@example.com"


def test_cancel_pending_only(app: ChokaQ, client: TestClient) -> None:
    s = app.storage
    a, b = enqueue(s, queue="c"), enqueue(s, queue="c")
    running = enqueue(s, queue="c2")
    run_one(s, running)
    r = client.post("/api/jobs/cancel", headers=OPS, json={"ids": [a, b, running]})
    assert r.status_code == 200
    assert r.json() == {"cancelled": 2, "skipped_ids": [running], "was_running": []}
    dead = client.get(f"/api/dlq/{a}", headers=VIEWER).json()
    assert dead["failure_reason"] == "Cancelled" and "ops@example.com" in dead["error_details"]
    assert failed_total(s, "c") == 2


def test_cancel_running_through_the_api(app: ChokaQ, client: TestClient) -> None:
    s = app.storage
    pending, held = enqueue(s, queue="c3"), enqueue(s, queue="c4")
    rec = run_one(s, held)
    body = {"ids": [pending, held], "running": True, "reason": "bad deploy"}
    # Bad input is refused whole: nothing is cancelled.
    assert client.post("/api/jobs/cancel", headers=OPS, json={**body, "reason": "x" * 501}).status_code == 422
    assert client.post("/api/jobs/cancel", headers=OPS, json={**body, "running": "yes"}).status_code == 422
    assert client.post("/api/jobs/cancel", headers=OPS, json={**body, "force": True}).status_code == 422
    assert client.post("/api/jobs/cancel", headers=VIEWER, json=body).status_code == 403
    assert s.get_job(held).location is Location.HOT  # type: ignore[union-attr]
    r = client.post("/api/jobs/cancel", headers=OPS, json=body)
    assert r.status_code == 200, r.text
    assert r.json() == {"cancelled": 2, "skipped_ids": [], "was_running": [held]}
    dead = client.get(f"/api/dlq/{held}", headers=VIEWER).json()
    assert dead["failure_reason"] == "Cancelled"
    details = dead["error_details"]
    assert details.startswith("Cancelled by ops@example.com: bad deploy\nIt was Processing on worker w-test")
    # The worker's late success is refused by the fence; the counters stay exact.
    from chokaq.storage import Completion

    assert s.complete("w-test", [Completion(rec.lease, 1)]) == set()
    assert (failed_total(s, "c3"), failed_total(s, "c4")) == (1, 1)
    # Resurrect works as for any dead job.
    assert client.post(f"/api/dlq/{held}/resurrect", headers=OPS).status_code == 200
    assert s.get_job(held).status is JobStatus.PENDING  # type: ignore[union-attr]


@pytest.mark.parametrize("batch", [3])
def test_archive_purge_in_batches(db_url: str, batch: int) -> None:
    app = make_app(db_url, storage={"cleanup_batch_size": batch})
    try:
        s = app.storage
        old = make_archived(s, 8, queue="done")
        with TestClient(create_api(app)) as client:
            # Operators may not purge; admins may.
            cutoff = (datetime.now(UTC) + timedelta(days=1)).isoformat()
            assert client.post("/api/archive/purge", headers=OPS, json={"older_than": cutoff}).status_code == 403
            none = client.post(
                "/api/archive/purge",
                headers=ADMIN,
                json={"older_than": (datetime.now(UTC) - timedelta(days=1)).isoformat()},
            )
            assert none.json() == {"deleted": 0}
            r = client.post("/api/archive/purge", headers=ADMIN, json={"older_than": cutoff})
            assert r.status_code == 200 and r.json() == {"deleted": 8}
            assert all(s.get_job(i) is None for i in old)
            rows = [
                a for a in client.get("/api/audit", headers=VIEWER).json()["items"] if a["action"] == "archive.purge"
            ]
            # 8 rows in batches of 3: three short transactions, each audited.
            assert [a["details"]["deleted"] for a in rows] == [2, 3, 3]
            assert all(a["details"]["batch_size"] == batch for a in rows)
    finally:
        app.close()


# ---------------------------------------------------------------- bound to what the operator saw
def _preview(client: TestClient, path: str, body: dict[str, object]) -> dict[str, object]:
    r = client.post(path, headers=ADMIN, json={**body, "dry_run": True})
    assert r.status_code == 200, r.text
    out: dict[str, object] = r.json()
    return out


def test_a_filter_action_needs_its_preview(app: ChokaQ, client: TestClient) -> None:
    make_dead(app.storage, 2, queue="p")
    body = {"filter": {"queue": "p"}}
    for extra in ({}, {"expected_count": 2}, {"snapshot": "x"}):
        r = client.post("/api/dlq/purge", headers=ADMIN, json={**body, **extra})
        assert r.status_code == 422 and "preview first" in r.text, r.text
    r = client.post("/api/dlq/purge", headers=ADMIN, json={**body, "expected_count": 2, "snapshot": "not-one"})
    assert r.status_code == 422 and "snapshot" in r.text
    assert client.get("/api/dlq", headers=VIEWER).json()["total"] == 2


def test_a_set_that_grew_after_the_preview_is_409_and_nothing_changes(app: ChokaQ, client: TestClient) -> None:
    s = app.storage
    make_dead(s, 3, queue="grow", details="smtp down")
    body = {"filter": {"queue": "grow"}, "max_jobs": 1000}
    preview = _preview(client, "/api/dlq/purge", body)
    assert preview["matched"] == 3 and preview["snapshot"]
    make_dead(s, 40, queue="grow", details="smtp down")  # more fail while the operator reads "Purge 3 jobs?"
    r = client.post(
        "/api/dlq/purge", headers=ADMIN, json={**body, "expected_count": 3, "snapshot": preview["snapshot"]}
    )
    assert r.status_code == 409, r.text
    assert "43" in r.json()["detail"] and "3 were previewed" in r.json()["detail"]
    assert client.get("/api/dlq", headers=VIEWER, params={"queue": "grow"}).json()["total"] == 43


def test_only_jobs_inside_the_snapshot_are_touched(app: ChokaQ, client: TestClient) -> None:
    s = app.storage
    seen = make_dead(s, 5, queue="snap")
    body = {"filter": {"queue": "snap"}, "max_jobs": 1000}
    preview = _preview(client, "/api/dlq/resurrect", body)
    # Meanwhile: two of the five are purged by someone else and two new ones fail: still 5 match.
    assert client.post("/api/dlq/purge", headers=ADMIN, json={"ids": seen[:2]}).json()["affected"] == 2
    late = make_dead(s, 2, queue="snap")
    r = client.post(
        "/api/dlq/resurrect", headers=OPS, json={**body, "expected_count": 5, "snapshot": preview["snapshot"]}
    )
    assert r.status_code == 200 and r.json()["affected"] == 3, r.text
    left = {j["id"] for j in client.get("/api/dlq", headers=VIEWER, params={"queue": "snap"}).json()["items"]}
    assert left == set(late)


@pytest.mark.parametrize("empty", [{}, {"tag": ""}, {"search": ""}, {"queue": None, "search": ""}])
def test_an_empty_filter_needs_all_true(app: ChokaQ, client: TestClient, empty: dict[str, object]) -> None:
    make_dead(app.storage, 2, queue="e")
    for extra in ({"dry_run": True}, {"expected_count": 2, "snapshot": "2026-01-01T00:00:00|x"}):
        r = client.post("/api/dlq/purge", headers=ADMIN, json={"filter": empty, **extra})
        assert r.status_code == 422 and "all" in r.text, r.text
    preview = _preview(client, "/api/dlq/purge", {"filter": empty, "all": True})
    assert preview["matched"] == 2
    r = client.post(
        "/api/dlq/purge",
        headers=ADMIN,
        json={"filter": empty, "all": True, "expected_count": 2, "snapshot": preview["snapshot"]},
    )
    assert r.json()["affected"] == 2
