"""get_job finds a job wherever it is in one statement, so a job moving between tables is never
reported missing: racing resurrects get 409, never 404."""

from __future__ import annotations

import threading
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import event

from chokaq import ChokaQ
from chokaq.domain.states import FailureReason, JobStatus, Location
from tests.api.helpers import HEADERS, enqueue, make_archived, make_dead


def test_get_job_is_one_statement_for_every_table(app: ChokaQ) -> None:
    s = app.storage
    hot, (dead,), (done,) = enqueue(s, payload='{"a": 1}', tags="t1"), make_dead(s, 1), make_archived(s, 1)
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(s.engine, "before_cursor_execute", record)
    try:
        found = {job_id: s.get_job(job_id) for job_id in (hot, dead, done, "no-such-job")}
    finally:
        event.remove(s.engine, "before_cursor_execute", record)
    job_statements = [x for x in statements if "JobsHot" in x or "JobsDLQ" in x or "JobsArchive" in x]
    assert len(job_statements) == 4, job_statements
    assert all("UNION ALL" in x for x in job_statements)
    h, d, a = found[hot], found[dead], found[done]
    assert found["no-such-job"] is None
    assert h is not None and (h.location, h.status, h.payload, h.tags) == (
        Location.HOT,
        JobStatus.PENDING,
        '{"a": 1}',
        "t1",
    )
    assert h.failure_reason is None and h.error_details is None
    assert d is not None and (d.location, d.failure_reason, d.error_details) == (
        Location.DLQ,
        FailureReason.FATAL_ERROR,
        "boom",
    )
    assert d.status is None and d.failed_at_utc is not None
    assert a is not None and a.location is Location.ARCHIVE and a.finished_at_utc is not None


def test_racing_resurrects_get_409_never_404(app: ChokaQ, client: TestClient) -> None:
    ops = HEADERS["operator"]
    for _ in range(15):
        (job,) = make_dead(app.storage, 1)
        statuses: list[int] = []
        barrier = threading.Barrier(4)

        def go(job_id: str = job, barrier: threading.Barrier = barrier, statuses: list[int] = statuses) -> None:
            barrier.wait()
            statuses.append(client.post(f"/api/dlq/{job_id}/resurrect", headers=ops).status_code)

        threads = [threading.Thread(target=go) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(statuses) == [200, 409, 409, 409], statuses
