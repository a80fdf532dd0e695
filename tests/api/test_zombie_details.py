"""A zombie's inspector data (GET /api/dlq/{id} -> zombie) and the sweep's one-line summary."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient

from chokaq import ChokaQ
from chokaq.api import create_api
from chokaq.domain.models import EnqueueRequest
from chokaq.runtime.sweeper import run_sweep
from tests.api.helpers import HEADERS, make_dead
from tests.helpers import age

VIEWER = HEADERS["viewer"]


def zombie(app: ChokaQ, type_: str, queue: str, silent: float) -> str:
    s = app.storage
    job_id, _ = s.enqueue(EnqueueRequest(type=type_, queue=queue, payload="{}"))
    (fetched,) = s.fetch("ghost-worker-7", 1, [queue])
    assert [j.id for j in s.start("ghost-worker-7", [fetched]).started] == [job_id]
    age(s, job_id, silent)
    return job_id


def test_a_zombie_shows_heartbeat_silence_timeout_worker_and_idempotency(
    app: ChokaQ, caplog: pytest.LogCaptureFixture
) -> None:
    @app.job("report_v1", queue="reports", idempotent=True)
    def report(payload: object) -> None:
        return None

    app.settings.recovery.processing_zombie_timeout = 900
    app.storage.update_queue("slow", zombie_timeout_seconds=1200)
    a = zombie(app, "report_v1", "reports", 3600)  # default timeout, idempotent handler
    b = zombie(app, "unknown_v1", "slow", 7200)  # queue override, no handler here
    with caplog.at_level(logging.WARNING, logger="chokaq"):
        result = run_sweep(app.storage, app.settings)
    assert result.archived == 2
    assert "ZombieRescue: recovered 0 abandoned, archived 2 zombies, retried 0 idempotent" in caplog.text

    with TestClient(create_api(app)) as client:
        za = client.get(f"/api/dlq/{a}", headers=VIEWER).json()["zombie"]
        zb = client.get(f"/api/dlq/{b}", headers=VIEWER).json()["zombie"]
    assert za["worker_id"] == "ghost-worker-7" and za["last_heartbeat_utc"].endswith("Z")
    # Silent from the (aged) heartbeat to the sweep: an hour, give or take the test's own run time.
    assert 3600 <= za["silent_seconds"] < 3660
    assert za["timeout_seconds"] == 900 and za["timeout_source"] == "default"
    assert za["handler_idempotent"] is True and za["handler_retries_zombies"] is False
    assert 7200 <= zb["silent_seconds"] < 7260
    assert zb["timeout_seconds"] == 1200 and zb["timeout_source"] == "queue"
    assert zb["handler_idempotent"] is None


def test_one_zombie_reads_singular_and_other_reasons_have_no_zombie_block(
    app: ChokaQ, client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = zombie(app, "t", "default", 3600)
    with caplog.at_level(logging.WARNING, logger="chokaq"):
        run_sweep(app.storage, app.settings)
    assert "ZombieRescue: recovered 0 abandoned, archived 1 zombie, retried" in caplog.text
    assert client.get(f"/api/dlq/{job_id}", headers=VIEWER).json()["zombie"]["silent_seconds"] >= 3600
    (dead_id,) = make_dead(app.storage, 1)
    assert client.get(f"/api/dlq/{dead_id}", headers=VIEWER).json()["zombie"] is None
