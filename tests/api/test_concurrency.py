"""Two operators resurrect the same dead job at the same moment: it moves once, the other gets 409."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from chokaq import ChokaQ
from chokaq.api import create_api
from chokaq.domain.states import Location
from tests.api.helpers import HEADERS, failed_total, make_app, make_dead


@pytest.fixture
def pg_app(pg_url: str) -> Iterator[ChokaQ]:
    app = make_app(pg_url)
    try:
        yield app
    finally:
        app.close()


@pytest.mark.postgres
def test_concurrent_double_resurrect_moves_once(pg_app: ChokaQ) -> None:
    s = pg_app.storage
    ids = make_dead(s, 10, queue="race")
    api = create_api(pg_app)
    for job_id in ids:
        barrier = threading.Barrier(2)
        statuses: list[int] = []
        lock = threading.Lock()

        def go(
            priority: int,
            job_id: str = job_id,
            barrier: threading.Barrier = barrier,
            statuses: list[int] = statuses,
            lock: threading.Lock = lock,
        ) -> None:
            with TestClient(api) as client:
                barrier.wait()
                r = client.post(
                    f"/api/dlq/{job_id}/resurrect", headers=HEADERS["operator"], json={"priority": priority}
                )
                with lock:
                    statuses.append(r.status_code)
                if r.status_code == 409:
                    assert r.json()["error"] == "conflict" and "hot" in r.json()["detail"]

        threads = [threading.Thread(target=go, args=(p,)) for p in (1, 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(statuses) == [200, 409], statuses
        rec = s.get_job(job_id)
        assert rec is not None and rec.location is Location.HOT and rec.attempt_count == 0
    assert failed_total(s, "race") == 0  # decremented once per job, never twice
    with TestClient(api) as client:
        audit = client.get("/api/audit", headers=HEADERS["viewer"], params={"page_size": 1000}).json()["items"]
    assert sorted(a["job_ids"][0] for a in audit if a["action"] == "dlq.resurrect") == sorted(ids)
