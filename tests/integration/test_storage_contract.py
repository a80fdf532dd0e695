"""The storage contract, run once per live profile of tests/profiles.py (fixture ``storage``); without a
server, SQL Server's arm is the capture at the driver (tests/driver/test_conformance.py)."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pydantic
import pytest
from sqlalchemy.exc import OperationalError

from chokaq.domain.models import EnqueueRequest, Lease
from chokaq.domain.states import FailureReason, JobStatus, Location
from chokaq.operations.job_out import JobOut
from chokaq.storage import Storage
from chokaq.storage.store import Completion
from tests.helpers import age, counts, totals

SWEEP = {"fetched_timeout": 60, "zombie_timeout": 60, "max_attempts": 3}


def enqueue(s: Storage, **kw: object) -> str:
    return s.enqueue(EnqueueRequest(type=str(kw.pop("type", "t")), **kw))[0]  # type: ignore[arg-type]


def claim(s: Storage, worker: str = "w1", n: int = 10, queues: list[str] | None = None) -> list[Lease]:
    jobs = s.fetch(worker, n, queues)
    return [j.lease for j in s.start(worker, jobs).started]


def test_enqueue_and_read_back(storage: Storage) -> None:
    job_id = enqueue(storage, payload='{"to": "a@b"}', queue="mail", priority=5, tags="x,y", created_by="me")
    job = storage.get_job(job_id)
    assert job is not None
    assert (job.location, job.status, job.queue, job.priority, job.tags) == (
        Location.HOT,
        JobStatus.PENDING,
        "mail",
        5,
        "x,y",
    )
    assert job.payload_json() == {"to": "a@b"} and job.created_by == "me" and job.attempt_count == 0
    assert JobOut.from_record(job).status == "Pending"
    assert storage.get_job("nope") is None


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"payload": "{not json"}, "not valid JSON"),
        ({"payload": '"' + "x" * 1_000_001 + '"'}, "limit is 1000000"),
        ({"queue": "q" * 256}, "at most 255"),
        ({"tags": "t" * 1001}, "at most 1000"),
        ({"idempotency_key": "k" * 256}, "at most 255"),
        ({"created_by": "c" * 101}, "at most 100"),
    ],
)
def test_bad_input_is_refused_before_storage(kw: dict[str, object], message: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=message):
        EnqueueRequest(type="t", **kw)  # type: ignore[arg-type]


def test_duplicate_idempotency_key_returns_the_live_job(storage: Storage) -> None:
    first, created = storage.enqueue(EnqueueRequest(type="t", idempotency_key="order-1"))
    again, created_again = storage.enqueue(EnqueueRequest(type="t", idempotency_key="order-1"))
    assert created and not created_again and again == first
    (lease,) = claim(storage)
    assert storage.complete("w1", [Completion(lease, 1)]) == {first}
    # Once the job has left the hot table the key is free again.
    third, created_third = storage.enqueue(EnqueueRequest(type="t", idempotency_key="order-1"))
    assert created_third and third != first


def test_idempotency_key_under_concurrency(storage: Storage) -> None:
    barrier = threading.Barrier(8)

    def go(_: int) -> str:
        barrier.wait()
        return storage.enqueue(EnqueueRequest(type="t", idempotency_key="same"))[0]

    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(go, range(8)))
    assert len(set(ids)) == 1
    assert counts(storage)["pending"] == 1


def test_fetch_order_priority_then_schedule(storage: Storage) -> None:
    low = enqueue(storage, priority=1)
    high = enqueue(storage, priority=50)
    mid_a = enqueue(storage, priority=10)
    mid_b = enqueue(storage, priority=10)
    later = enqueue(storage, priority=99, delay_seconds=3600)
    got = [j.id for j in storage.fetch("w1", 10)]
    assert got == [high, mid_a, mid_b, low]
    assert later not in got


def test_queue_filter_and_pause(storage: Storage) -> None:
    a = enqueue(storage, queue="a")
    b = enqueue(storage, queue="b")
    storage.update_queue("b", paused=True)
    assert [j.id for j in storage.fetch("w1", 10)] == [a]
    storage.update_queue("b", paused=False)
    assert [j.id for j in storage.fetch("w1", 10, ["b"])] == [b]


def test_pause_between_fetch_and_start_releases(storage: Storage) -> None:
    job_id = enqueue(storage, queue="p")
    jobs = storage.fetch("w1", 5)
    storage.update_queue("p", paused=True)
    result = storage.start("w1", jobs)
    assert result.started == [] and result.released == [job_id] and result.lost == []
    assert storage.get_job(job_id).status == JobStatus.PENDING  # type: ignore[union-attr]


def test_max_workers_holds_across_workers(storage: Storage) -> None:
    storage.update_queue("limited", max_workers=2)
    for _ in range(6):
        enqueue(storage, queue="limited")
    first = storage.fetch("w1", 5)
    second = storage.fetch("w2", 5)
    assert len(first) + len(second) == 2
    leases = [j.lease for j in storage.start("w1", first).started]
    assert storage.fetch("w3", 5) == []
    storage.complete("w1", [Completion(leases[0], 1)])
    assert len(storage.fetch("w3", 5)) == 1


def test_max_workers_counts_claims_that_start(storage: Storage) -> None:
    storage.update_queue("limited", max_workers=2)
    for _ in range(6):
        enqueue(storage, queue="limited")
    running = storage.fetch("w1", 5, start=True)
    assert len(running) == 2 and {j.status for j in running} == {JobStatus.PROCESSING}
    assert storage.fetch("w2", 5, start=True) == []
    storage.complete("w1", [Completion(running[0].lease, 1)])
    (third,) = storage.fetch("w2", 5, start=True)
    assert third.status == JobStatus.PROCESSING and third.attempt_count == 1


def test_start_is_fenced_by_worker(storage: Storage) -> None:
    enqueue(storage)
    (job,) = storage.fetch("w1", 1)
    stolen = dataclasses.replace(job, worker_id="w2")
    assert storage.start("w2", [stolen]).lost == [job.id]
    started = storage.start("w1", [job]).started
    assert [j.attempt_count for j in started] == [1]
    assert started[0].status == JobStatus.PROCESSING and started[0].heartbeat_utc is not None


def test_moves_are_fenced_by_worker_and_attempt(storage: Storage) -> None:
    enqueue(storage)
    (lease,) = claim(storage)
    wrong_attempt = Lease(lease.job_id, lease.worker_id, lease.attempt + 1)
    other_worker = Lease(lease.job_id, "w2", lease.attempt)
    assert storage.heartbeat("w1", [wrong_attempt]) == set()
    assert storage.heartbeat("w2", [other_worker]) == set()
    assert storage.complete("w2", [Completion(other_worker, 1)]) == set()
    assert not storage.fail(wrong_attempt, FailureReason.FATAL_ERROR, "x")
    assert not storage.retry(other_worker, 0)
    assert storage.reschedule("w1", [wrong_attempt]) == []
    assert storage.heartbeat("w1", [lease]) == {lease.job_id}
    assert storage.complete("w1", [Completion(lease, 7)]) == {lease.job_id}
    archived = storage.get_job(lease.job_id)
    assert archived is not None and archived.location is Location.ARCHIVE and archived.duration_ms == 7


def test_late_success_after_zombie_and_resurrect_is_refused(storage: Storage) -> None:
    from chokaq.storage.admin import Actor, AdminStore

    job_id = enqueue(storage)
    (lease,) = claim(storage, "w1")
    age(storage, job_id, 120)
    assert storage.sweep(**SWEEP).archived == 1
    AdminStore(storage).resurrect(job_id, Actor("ops", "operator"))
    (new_lease,) = claim(storage, "w2")
    assert new_lease.attempt == 1
    # The first run finishes late: its success, failure or retry must not touch the new run.
    assert storage.complete("w1", [Completion(lease, 1)]) == set()
    assert not storage.fail(lease, FailureReason.FATAL_ERROR, "late")
    assert not storage.retry(lease, 0)
    assert storage.heartbeat("w1", [lease]) == set()
    assert storage.complete("w2", [Completion(new_lease, 1)]) == {job_id}
    assert totals(storage) == (1, 0, 0)  # the zombie's FailedTotal was given back by the resurrect


def test_retry_makes_the_job_due_later(storage: Storage) -> None:
    job_id = enqueue(storage)
    (lease,) = claim(storage)
    assert storage.retry(lease, 3600)
    job = storage.get_job(job_id)
    assert job is not None and job.status == JobStatus.PENDING and job.worker_id is None
    assert job.attempt_count == 1
    assert storage.fetch("w1", 5) == []
    assert totals(storage) == (0, 0, 1)


def test_stats_are_exact_after_every_move(storage: Storage) -> None:
    ids = [enqueue(storage) for _ in range(5)]
    leases = claim(storage)
    assert len(leases) == 5
    storage.complete("w1", [Completion(leases[0], 1), Completion(leases[1], 1)])
    storage.fail(leases[2], FailureReason.MAX_RETRIES_EXCEEDED, "x")
    storage.retry(leases[3], 0)
    storage.reschedule("w1", [leases[4]])
    assert totals(storage) == (2, 1, 1)
    assert counts(storage) == {"pending": 2, "archive": 2, "dlq": 1}
    stats = {q.queue: q for q in storage.queue_stats()}["default"]
    assert (stats.pending, stats.succeeded_total, stats.failed_total, stats.retried_total, stats.dlq_size) == (
        2,
        2,
        1,
        1,
        1,
    )
    assert stats.oldest_pending_lag_seconds is not None and stats.oldest_pending_lag_seconds >= 0
    rescheduled = storage.get_job(leases[4].job_id)
    assert rescheduled is not None and rescheduled.attempt_count == 0  # shutdown gives the attempt back
    assert ids


def test_sweep_recovers_abandoned_fetches(storage: Storage) -> None:
    fresh = enqueue(storage)
    stale = enqueue(storage)
    storage.fetch("w1", 5)
    age(storage, stale, 120, heartbeat=False)
    result = storage.sweep(**SWEEP)
    assert (result.recovered, result.archived) == (1, 0)
    assert storage.get_job(stale).status == JobStatus.PENDING  # type: ignore[union-attr]
    assert storage.get_job(fresh).status == JobStatus.FETCHED  # type: ignore[union-attr]


def test_sweep_buries_zombies_with_reason(storage: Storage) -> None:
    alive = enqueue(storage)
    dead = enqueue(storage)
    claim(storage)
    age(storage, dead, 120)
    result = storage.sweep(**SWEEP)
    assert (result.recovered, result.archived, result.zombie_ids) == (0, 1, [dead])
    job = storage.get_job(dead)
    assert job is not None and job.location is Location.DLQ and job.failure_reason == FailureReason.ZOMBIE
    assert job.error_details is not None and "heartbeat expired" in job.error_details
    assert job.worker_id == "w1" and job.heartbeat_utc is not None
    assert storage.get_job(alive).location is Location.HOT  # type: ignore[union-attr]
    assert totals(storage) == (0, 1, 0)
    assert storage.sweep(**SWEEP).archived == 0


def test_per_queue_zombie_timeout(storage: Storage) -> None:
    storage.update_queue("sms", zombie_timeout_seconds=30)
    storage.update_queue("reports", zombie_timeout_seconds=1800)
    sms = enqueue(storage, queue="sms")
    report = enqueue(storage, queue="reports")
    plain = enqueue(storage)
    claim(storage)
    for job_id in (sms, report, plain):
        age(storage, job_id, 45)
    # Global timeout 60s: only the queue with a 30s override is dead after 45s.
    assert storage.sweep(**SWEEP).zombie_ids == [sms]
    for job_id in (report, plain):
        age(storage, job_id, 600)
    assert storage.sweep(**SWEEP).zombie_ids == [plain]
    assert storage.get_job(report).location is Location.HOT  # type: ignore[union-attr]


def test_idempotent_zombies_are_retried_until_attempts_run_out(storage: Storage) -> None:
    job_id = enqueue(storage, type="safe")
    jobs = storage.fetch("w1", 1)
    storage.start("w1", jobs, zombie_retry_types={"safe"})
    age(storage, job_id, 120)
    result = storage.sweep(fetched_timeout=60, zombie_timeout=60, max_attempts=2)
    assert (result.archived, result.retried_zombies) == (0, 1)
    assert storage.get_job(job_id).status == JobStatus.PENDING  # type: ignore[union-attr]
    jobs = storage.fetch("w1", 1)
    storage.start("w1", jobs, zombie_retry_types={"safe"})
    age(storage, job_id, 120)
    result = storage.sweep(fetched_timeout=60, zombie_timeout=60, max_attempts=2)
    assert (result.archived, result.retried_zombies) == (1, 0)


def test_release_returns_only_our_fetched_jobs(storage: Storage) -> None:
    a, b = enqueue(storage), enqueue(storage)
    jobs = storage.fetch("w1", 5)
    leases = {j.id: j.lease for j in jobs}
    storage.start("w1", [j for j in jobs if j.id == a])
    assert storage.release("w1", list(leases.values())) == [b]
    assert storage.release("w2", [Lease(b, "w2", 0)]) == []


def test_transient_errors_replay_the_transaction(storage: Storage) -> None:
    calls: list[str] = []

    def flaky(op: str) -> None:
        calls.append(op)
        if len(calls) <= 2:
            raise OperationalError("stmt", {}, sqlite3.OperationalError("database is locked"))

    storage.fault_injector = flaky
    job_id = enqueue(storage)
    storage.fault_injector = None
    assert calls == ["enqueue"] * 3
    assert storage.get_job(job_id) is not None

    def fatal(op: str) -> None:
        raise OperationalError("stmt", {}, sqlite3.OperationalError("no such table: nope"))

    storage.fault_injector = fatal
    with pytest.raises(OperationalError):
        enqueue(storage)


def test_a_claim_can_start_its_jobs_at_once(storage: Storage) -> None:
    idem = enqueue(storage, type="idem")
    plain = enqueue(storage, type="plain")
    skipped = enqueue(storage)
    jobs = storage.fetch("w1", 10, start=True, zombie_retry_types={"idem"}, skip=[skipped])
    assert {j.id for j in jobs} == {idem, plain}
    for job in jobs:
        stored = storage.get_job(job.id)
        assert stored is not None
        for record in (job, stored):
            assert record.status == JobStatus.PROCESSING and record.attempt_count == 1
            assert record.worker_id == "w1"
            assert record.started_at_utc is not None and record.heartbeat_utc is not None
            assert record.zombie_retry is (job.id == idem)
    # The leases it hands out are those of started jobs: heartbeats and moves accept them.
    leases = [j.lease for j in jobs]
    assert storage.heartbeat("w1", leases) == {idem, plain}
    assert storage.start("w1", jobs).started == []  # nothing Fetched to start
    assert storage.complete("w1", [Completion(lease, 1) for lease in leases]) == {idem, plain}
    assert totals(storage)[0] == 2
    # Skipped, not lost: the next claim takes it.
    assert [j.id for j in storage.fetch("w1", 10)] == [skipped]


def test_enqueue_joins_the_callers_transaction(storage: Storage) -> None:
    with storage.engine.connect() as conn:
        with conn.begin():
            kept = storage.enqueue(EnqueueRequest(type="t"), conn=conn)[0]
        trans = conn.begin()
        dropped = storage.enqueue(EnqueueRequest(type="t"), conn=conn)[0]
        trans.rollback()
    assert storage.get_job(kept) is not None
    assert storage.get_job(dropped) is None


def test_a_batch_answers_per_job_and_keys_meet_live_jobs_and_each_other(storage: Storage) -> None:
    held = enqueue(storage, idempotency_key="held")
    reqs = [
        EnqueueRequest(type="t", idempotency_key="held"),
        EnqueueRequest(type="t", idempotency_key="new"),
        EnqueueRequest(type="t", idempotency_key="new"),
        EnqueueRequest(type="t", tags="plain"),
    ]
    out = storage.enqueue_all(reqs)
    assert [e.created for e in out] == [False, True, False, True]
    assert out[0].id == held and out[2].id == out[1].id
    assert counts(storage)["pending"] == 3


def test_a_batch_joins_the_callers_transaction(storage: Storage) -> None:
    with storage.engine.connect() as conn:
        with conn.begin():
            kept = storage.enqueue_all([EnqueueRequest(type="t"), EnqueueRequest(type="t")], conn=conn)
        trans = conn.begin()
        dropped = storage.enqueue_all([EnqueueRequest(type="t")], conn=conn)
        trans.rollback()
    assert all(storage.get_job(e.id) is not None for e in kept)
    assert storage.get_job(dropped[0].id) is None


def test_upgrade_is_idempotent(storage: Storage) -> None:
    assert storage.upgrade() == []


def test_a_move_that_would_half_happen_rolls_back(tmp_path: Path) -> None:
    """The copy and the delete of a move must agree row for row, or nothing moves. A trigger
    that removes the hot row behind the move's back makes the delete come up short."""
    storage = Storage(f"sqlite:///{tmp_path / 'm.db'}")
    storage.upgrade()
    job_id = enqueue(storage)
    (job,) = storage.start("w1", storage.fetch("w1", 1)).started
    storage.write(
        lambda c: c.exec_driver_sql(
            'CREATE TRIGGER steal AFTER INSERT ON "JobsArchive" BEGIN DELETE FROM "JobsHot" WHERE "Id" = NEW."Id"; END'
        )
    )
    with pytest.raises(RuntimeError, match="copied 1 rows but deleted 0"):
        storage.complete("w1", [Completion(job.lease, 5)])
    after = storage.get_job(job_id)
    assert after is not None and after.location is Location.HOT and after.status == JobStatus.PROCESSING
    assert totals(storage)[0] == 0
    storage.close()
