"""Keys compare exactly, on every database: case and script matter, edge whitespace is refused.

Runs on SQLite, PostgreSQL and, with CHOKAQ_TEST_MSSQL_URL, SQL Server, where the keys need a
binary collation and NVARCHAR to behave as they do on the other two.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from chokaq import ChokaQ
from chokaq.domain.errors import JobValidationError
from chokaq.domain.models import EnqueueRequest
from chokaq.storage import Storage
from chokaq.storage.store import Completion

ROOT = Path(__file__).resolve().parents[2]


def test_idempotency_keys_differing_only_by_case_are_two_jobs(storage: Storage) -> None:
    lower, created_lower = storage.enqueue(EnqueueRequest(type="t", idempotency_key="abc"))
    upper, created_upper = storage.enqueue(EnqueueRequest(type="t", idempotency_key="ABC"))
    assert created_lower and created_upper
    assert lower != upper
    # The same key still finds its own job.
    again, created_again = storage.enqueue(EnqueueRequest(type="t", idempotency_key="ABC"))
    assert (again, created_again) == (upper, False)
    # Accents are not folded either.
    accented, created_accented = storage.enqueue(EnqueueRequest(type="t", idempotency_key="ábc"))
    assert created_accented and accented not in (lower, upper)


def test_queues_differing_only_by_case_have_their_own_stats(storage: Storage) -> None:
    storage.enqueue_many([EnqueueRequest(type="t", queue="Emails") for _ in range(2)])
    storage.enqueue(EnqueueRequest(type="t", queue="emails"))
    (job,) = storage.fetch("w1", 5, ["emails"], start=True)
    assert job.queue == "emails"
    storage.complete("w1", [Completion(job.lease, 1)])
    stats = {s.queue: s for s in storage.queue_stats()}
    assert (stats["Emails"].pending, stats["Emails"].succeeded_total) == (2, 0)
    assert (stats["emails"].pending, stats["emails"].succeeded_total) == (0, 1)
    assert {q.name for q in storage.list_queues()} >= {"Emails", "emails"}
    # Pausing one does not pause the other.
    storage.update_queue("Emails", paused=True)
    paused = {q.name: q.is_paused for q in storage.list_queues()}
    assert paused["Emails"] and not paused["emails"]


def test_non_latin_queue_type_tags_and_key_round_trip(storage: Storage) -> None:
    req = EnqueueRequest(
        type="发送邮件", queue="メール", tags="тег,标签,🙂", idempotency_key="ключ-1", payload='{"имя": "Ёж"}'
    )
    job_id, _ = storage.enqueue(req)
    stored = storage.get_job(job_id)
    assert stored is not None
    assert (stored.type, stored.queue, stored.tags, stored.idempotency_key) == (
        "发送邮件",
        "メール",
        "тег,标签,🙂",
        "ключ-1",
    )
    assert stored.payload_json() == {"имя": "Ёж"}
    # The key finds its job, the queue serves its claims, the stats name it.
    assert storage.enqueue(req) == (job_id, False)
    assert storage.fetch("w", 5, ["メール"])[0].id == job_id
    assert "メール" in {s.queue for s in storage.queue_stats()}


@pytest.mark.parametrize("field", ["queue", "type", "idempotency_key"])
@pytest.mark.parametrize("value", [" emails", "emails ", "emails\t", "\u00a0emails"])
def test_keys_with_edge_whitespace_are_refused(field: str, value: str) -> None:
    fields = {"type": "t", field: value}
    with pytest.raises(ValidationError) as err:
        EnqueueRequest(**fields)  # type: ignore[arg-type]
    assert "whitespace" in str(err.value) and field in str(err.value)


def test_app_enqueue_refuses_edge_whitespace(db_url: str) -> None:
    app = ChokaQ(storage_url=db_url)
    try:
        app.storage.upgrade()
        with pytest.raises(ValidationError, match="whitespace"):
            app.enqueue("t", {}, queue="emails ")
        with pytest.raises(JobValidationError, match="whitespace"):
            app.storage.update_queue("emails ", paused=True)
        assert app.storage.queue_stats() == []
    finally:
        app.close()


def test_cli_enqueue_refuses_edge_whitespace_in_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    proc = subprocess.run(
        [sys.executable, "-m", "chokaq.cli.main", "--db", url, "enqueue", "t", "--idempotency-key", "k "],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "idempotency_key" in lines[0] and "whitespace" in lines[0], proc.stderr


def test_api_refuses_edge_whitespace_with_the_reason(db_url: str) -> None:
    from fastapi.testclient import TestClient

    from chokaq.api.app import create_api
    from tests.api.helpers import HEADERS, make_app

    app = make_app(db_url)
    try:
        app.storage.upgrade()
        with TestClient(create_api(app)) as client:
            r = client.post("/api/jobs", json={"type": "t", "queue": "emails "}, headers=HEADERS["operator"])
            assert r.status_code == 422, r.text
            assert "queue 'emails ' starts or ends with whitespace" in r.text
            r = client.patch("/api/queues/emails%20", json={"paused": True}, headers=HEADERS["admin"])
            assert r.status_code == 422 and "whitespace" in r.text, r.text
            assert client.get("/api/jobs", headers=HEADERS["viewer"]).json()["total"] == 0
    finally:
        app.close()
