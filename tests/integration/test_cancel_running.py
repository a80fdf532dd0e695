"""Cancelling jobs a worker holds, on every database: one transaction moves them to the DLQ, the
fence then refuses the worker's every move for them, the worker can tell an operator's cancel from
another loss, and a cancel racing a finish ends with exactly one of them applied."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from chokaq.domain.errors import JobValidationError
from chokaq.domain.models import EnqueueRequest, JobRecord
from chokaq.domain.states import FailureReason, Location
from chokaq.storage import Storage
from chokaq.storage.admin import Actor, AdminStore
from chokaq.storage.cancel import cancelled_runs, note_stopped
from chokaq.storage.store import Completion
from tests.helpers import counts, totals

OPS = Actor("ops:alice", "operator")


@pytest.fixture
def s(db_url: str) -> Iterator[Storage]:
    storage = Storage(db_url)
    storage.upgrade()
    try:
        yield storage
    finally:
        storage.close()


def running(s: Storage, n: int = 1, worker: str = "w") -> list[JobRecord]:
    s.enqueue_many([EnqueueRequest(type="t") for _ in range(n)])
    return s.start(worker, s.fetch(worker, n)).started


def test_held_jobs_are_cancelled_only_when_asked_and_the_fence_refuses_their_worker(s: Storage) -> None:
    (proc,) = running(s)
    s.enqueue(EnqueueRequest(type="t"))
    (fetched,) = s.fetch("w2", 5)
    pending, _ = s.enqueue(EnqueueRequest(type="t"))
    admin = AdminStore(s)

    first = admin.cancel([pending, proc.id, fetched.id, "nope"], OPS)
    assert (first.affected, first.skipped_ids, first.was_running) == (1, [proc.id, fetched.id, "nope"], [])
    res = admin.cancel([proc.id, fetched.id, proc.id], OPS, running=True, reason="bad deploy")
    assert (res.matched, res.affected, sorted(res.was_running)) == (2, 2, sorted([proc.id, fetched.id]))
    dead = s.get_job(proc.id)
    assert dead is not None and dead.location is Location.DLQ and dead.failure_reason is FailureReason.CANCELLED
    assert dead.error_details is not None and dead.error_details.startswith(
        "Cancelled by ops:alice: bad deploy\nIt was Processing on worker w (attempt 1, started "
    )
    assert "was told to stop" in dead.error_details
    fetched_dead = s.get_job(fetched.id)
    assert fetched_dead is not None and "It was Fetched on worker w2 (attempt 0" in (fetched_dead.error_details or "")
    assert totals(s) == (0, 3, 0) and counts(s) == {"archive": 0, "dlq": 3}
    # The fence: nothing the worker sends for the cancelled run lands.
    assert s.heartbeat("w", [proc.lease]) == set()
    assert s.complete("w", [Completion(proc.lease, 5)]) == set()
    assert not s.fail(proc.lease, FailureReason.FATAL_ERROR, "late")
    assert not s.retry(proc.lease, 1.0)
    assert s.start("w2", [fetched]).started == []
    assert totals(s) == (0, 3, 0) and counts(s) == {"archive": 0, "dlq": 3}
    assert s.get_job(proc.id).failure_reason is FailureReason.CANCELLED  # type: ignore[union-attr]
    audit = [a for a in admin.list_audit(actor="ops:alice")[0] if a["action"] == "job.cancel"]
    assert [a["job_count"] for a in audit] == [2, 1]  # newest first
    assert audit[0]["details"]["reason"] == "bad deploy"
    assert {r["worker"] for r in audit[0]["details"]["was_running"]} == {"w", "w2"}


def test_a_cancel_reason_is_stored_redacted_and_storable(s: Storage) -> None:
    # An operator pastes what they have: a URL with its password, a NUL, half a surrogate pair.
    # PostgreSQL refuses NUL in text, so before the fix the whole cancel failed there.
    (proc,) = running(s)
    reason = "db postgresql://app:hunter2@db.internal/jobs down\x00 \ud800 see ticket"
    res = AdminStore(s).cancel([proc.id], OPS, running=True, reason=reason)
    assert res.affected == 1
    dead = s.get_job(proc.id)
    assert dead is not None and dead.error_details is not None
    head = dead.error_details.splitlines()[0]
    assert "hunter2" not in dead.error_details and "\x00" not in dead.error_details
    assert head.startswith("Cancelled by ops:alice: db postgresql://app:") and "see ticket" in head
    rows, _ = AdminStore(s).list_audit(job_id=proc.id)
    assert rows and "hunter2" not in json.dumps([r["details"] for r in rows])


def test_bad_cancel_requests_are_refused_whole(s: Storage) -> None:
    (proc,) = running(s)
    admin = AdminStore(s)
    with pytest.raises(JobValidationError, match="at most 500"):
        admin.cancel([proc.id], OPS, running=True, reason="x" * 501)
    with pytest.raises(JobValidationError, match="no ids"):
        admin.cancel([], OPS, running=True)
    assert s.get_job(proc.id).location is Location.HOT  # type: ignore[union-attr]
    assert totals(s) == (0, 0, 0)


def test_a_worker_tells_an_operators_cancel_from_another_loss_and_notes_the_stop(s: Storage) -> None:
    a, b, c = running(s, 3)
    AdminStore(s).cancel([a.id], OPS, running=True)
    assert s.fail(b.lease, FailureReason.FATAL_ERROR, "its own failure")  # gone too, but not cancelled
    assert cancelled_runs(s, "w", [a.lease, b.lease, c.lease]) == {a.id}
    # Another attempt, or another worker, is not this run.
    assert cancelled_runs(s, "w", [type(a.lease)(a.id, "w", a.lease.attempt + 1)]) == set()
    assert cancelled_runs(s, "other", [type(a.lease)(a.id, "other", a.lease.attempt)]) == set()
    assert cancelled_runs(s, "w", []) == set()
    assert note_stopped(s, a.lease, "\nIts handler stopped at T.")
    assert (s.get_job(a.id).error_details or "").endswith("was told to stop.\nIts handler stopped at T.")  # type: ignore[union-attr]
    assert not note_stopped(s, b.lease, "\nnot cancelled")  # another reason's row is left alone
    assert not note_stopped(s, type(a.lease)(a.id, "w", 9), "\nanother run")
    assert "not cancelled" not in (s.get_job(b.id).error_details or "")  # type: ignore[union-attr]


ROUNDS = 100


def _finish(s: Storage, job: JobRecord, go: threading.Barrier, success: bool) -> bool:
    go.wait()
    if success:
        return job.id in s.complete("w", [Completion(job.lease, 1)])
    return s.fail(job.lease, FailureReason.FATAL_ERROR, "boom")


def _cancel(admin: AdminStore, job: JobRecord, go: threading.Barrier) -> int:
    go.wait()
    return admin.cancel([job.id], OPS, running=True).affected


def test_cancel_racing_a_finish_exactly_one_wins(s: Storage) -> None:
    admin = AdminStore(s)
    wins: Counter[str] = Counter()
    # Two threads kept for every round: their connections are warm, so neither side starts late
    # for want of one (each database thread of the hot path keeps a connection of its own).
    with ThreadPoolExecutor(max_workers=2) as pool:
        for n in range(ROUNDS):
            (job,) = running(s)
            finish_with_success = n % 2 == 0
            go = threading.Barrier(2)

            finishing = pool.submit(_finish, s, job, go, finish_with_success)
            cancelling = pool.submit(_cancel, admin, job, go)
            finished, cancelled = finishing.result(60), cancelling.result(60)
            assert finished != (cancelled == 1), f"round {n}: finish {finished}, cancel {cancelled}"
            final = s.get_job(job.id)
            assert final is not None
            if cancelled:
                wins["cancel"] += 1
                assert final.location is Location.DLQ and final.failure_reason is FailureReason.CANCELLED
            else:
                wins["finish"] += 1
                assert final.location is (Location.ARCHIVE if finish_with_success else Location.DLQ)
                assert final.failure_reason is (None if finish_with_success else FailureReason.FATAL_ERROR)
    # Every job counted once: archived or dead, never both, never neither.
    c = counts(s)
    succeeded, failed, _ = totals(s)
    assert c["archive"] + c["dlq"] == ROUNDS == succeeded + failed
    assert c["archive"] == succeeded and c["dlq"] == failed
    print(f"cancel vs finish over {ROUNDS} rounds: {dict(wins)}")


def test_postgres_tells_the_running_jobs_worker_at_commit(pg_url: str) -> None:
    # PostgreSQL only (NOTIFY): it takes pg_url, not the per-profile db_url.
    import psycopg
    from sqlalchemy.engine import make_url

    db_url = pg_url
    s = Storage(db_url)
    s.upgrade()
    (job,) = running(s)
    pending, _ = s.enqueue(EnqueueRequest(type="t"))
    dsn = make_url(db_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN chokaq_cancel")
        AdminStore(s).cancel([pending], OPS, running=True)  # a Pending job has no worker to tell
        AdminStore(s).cancel([job.id], OPS, running=True)
        heard = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
    assert [json.loads(p) for p in heard] == [{"id": job.id, "worker": "w", "attempt": 1}]
    s.close()
