"""The Workers routes: the list (live first, with the jobs each holds and its zombies), one worker's
detail, the state filter, a missing worker and bad input."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy import update

from chokaq import ChokaQ
from chokaq.domain.models import EnqueueRequest
from chokaq.domain.workers import WorkerIdentity
from chokaq.storage import WorkerPresence
from chokaq.storage.schema import jobs_hot
from tests.api.helpers import HEADERS

VIEWER = HEADERS["viewer"]


def _worker(app: ChokaQ, worker_id: str, queues: tuple[str, ...] | None = None) -> WorkerPresence:
    presence = WorkerPresence(app.storage, WorkerIdentity(worker_id, "box-1", 77, "0.1.0", queues, 4))
    presence.record(0, starting=True)
    return presence


def test_the_list_and_the_detail_show_what_each_worker_holds(app: ChokaQ, client: TestClient) -> None:
    _worker(app, "w-live", ("reports",))
    _worker(app, "w-gone").stopped()
    app.storage.enqueue_many([EnqueueRequest(type="t_v1", queue="reports") for _ in range(3)])
    held = app.storage.fetch("w-live", 3, start=True)
    zombie = held[0].id
    db_now = app.storage.ping()
    app.storage.write(
        lambda c: c.execute(
            update(jobs_hot).where(jobs_hot.c.Id == zombie).values(HeartbeatUtc=db_now - timedelta(hours=1))
        )
    )
    assert app.storage.sweep(fetched_timeout=600, zombie_timeout=60, max_attempts=3).archived == 1

    body = client.get("/api/workers", headers=VIEWER).json()
    assert body["lost_after_seconds"] == app.settings.recovery.processing_zombie_timeout
    live, gone = body["items"]
    assert (live["worker_id"], live["state"], live["holding"], live["zombies"]) == ("w-live", "live", 2, 1)
    assert live["queues"] == ["reports"] and live["host"] == "box-1" and live["held_jobs"] is None
    assert live["last_seen_utc"].endswith("Z") and live["stopped_at_utc"] is None
    assert (gone["worker_id"], gone["state"], gone["holding"], gone["zombies"]) == ("w-gone", "stopped", 0, 0)
    assert gone["stopped_at_utc"].endswith("Z")

    only = client.get("/api/workers", params={"state": "stopped"}, headers=VIEWER).json()["items"]
    assert [w["worker_id"] for w in only] == ["w-gone"]

    detail = client.get("/api/workers/w-live", headers=VIEWER).json()
    assert sorted(j["id"] for j in detail["held_jobs"]) == sorted(j.id for j in held[1:])
    assert {j["status"] for j in detail["held_jobs"]} == {"Processing"}
    assert [(j["id"], j["status"]) for j in detail["zombie_jobs"]] == [(zombie, "Zombie")]

    # The job list's existing filter finds what a worker ran.
    hot = client.get("/api/jobs", params={"worker": "w-live"}, headers=VIEWER).json()
    assert hot["total"] == 2
    dead = client.get("/api/dlq", params={"worker": "w-live"}, headers=VIEWER).json()
    assert [j["id"] for j in dead["items"]] == [zombie]


def test_a_missing_worker_is_404_and_bad_input_422(client: TestClient) -> None:
    r = client.get("/api/workers/nobody", headers=VIEWER)
    assert r.status_code == 404 and r.json()["error"] == "not_found" and "nobody" in r.json()["detail"]
    assert client.get("/api/workers", params={"state": "zombie"}, headers=VIEWER).status_code == 422
    assert client.get("/api/workers/" + "x" * 101, headers=VIEWER).status_code == 422
    assert client.get("/api/workers").status_code == 401
