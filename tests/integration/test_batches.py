"""Bounded transactions, on every database: the sweep, enqueue_many and retention work in batches of
Storage.CleanupBatchSize and loop until done; nothing is skipped and no counter is lost."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import FailureReason, JobStatus, Location
from chokaq.settings import StorageSettings
from chokaq.storage import Storage
from chokaq.storage.admin import Actor, AdminStore
from chokaq.storage.store import Completion
from tests.helpers import age, counts, totals

BATCH = 2


@pytest.fixture
def small(db_url: str) -> Iterator[Storage]:
    s = Storage(db_url, settings=StorageSettings(transient_retries=2, cleanup_batch_size=BATCH))
    s.upgrade()
    try:
        yield s
    finally:
        s.close()


def test_enqueue_many_in_batches_keeps_every_job_and_the_order_of_ids(small: Storage) -> None:
    reqs = [EnqueueRequest(type="t", payload=f'{{"n": {i}}}', delay_seconds=i % 2) for i in range(5)]
    reqs.insert(2, EnqueueRequest(type="t", idempotency_key="k"))
    ids = small.enqueue_many(reqs)
    assert len(ids) == 6 and len(set(ids)) == 6
    assert small.enqueue_many([EnqueueRequest(type="t", idempotency_key="k")]) == [ids[2]]
    for i, job_id in enumerate(ids):
        job = small.get_job(job_id)
        assert job is not None and job.status == JobStatus.PENDING
        assert job.payload == reqs[i].payload
    assert counts(small)["pending"] == 6


def test_the_sweep_loops_over_batches_until_every_phase_is_done(small: Storage) -> None:
    # Every phase holds more than one batch: 3 abandoned reservations, 3 zombies to retry, 5 to bury.
    abandoned = small.enqueue_many([EnqueueRequest(type="f") for _ in range(3)])
    assert sorted(j.id for j in small.fetch("w", 3)) == sorted(abandoned)
    reqs = [EnqueueRequest(type="t") for _ in range(5)] + [EnqueueRequest(type="r") for _ in range(3)]
    ids = small.enqueue_many(reqs)
    started = small.start("w", small.fetch("w", 8), zombie_retry_types={"r"}).started
    assert len(started) == 8
    for job_id in abandoned + ids:
        age(small, job_id, 120)
    result = small.sweep(fetched_timeout=60, zombie_timeout=60, max_attempts=3)
    assert (result.recovered, result.retried_zombies, result.archived) == (3, 3, 5)
    assert sorted(result.zombie_ids) == sorted(ids[:5])
    for job_id in ids[:5]:
        record = small.get_job(job_id)
        assert record is not None and record.location is Location.DLQ
        assert record.failure_reason == FailureReason.ZOMBIE and "heartbeat expired" in (record.error_details or "")
        assert "worker w, attempt 1)" in (record.error_details or "")
    for job_id in abandoned + ids[5:]:
        record = small.get_job(job_id)
        assert record is not None and record.status == JobStatus.PENDING
    _, failed, retried = totals(small)
    assert (failed, retried) == (5, 3)
    again = small.sweep(fetched_timeout=60, zombie_timeout=60, max_attempts=3)
    assert (again.recovered, again.archived, again.retried_zombies) == (0, 0, 0)


def test_purge_archive_deletes_only_old_rows_in_batches(small: Storage) -> None:
    small.enqueue_many([EnqueueRequest(type="t") for _ in range(5)])
    jobs = small.start("w", small.fetch("w", 5)).started
    small.complete("w", [Completion(j.lease, 1) for j in jobs])
    admin = AdminStore(small)
    me = Actor("ops", "admin")
    assert admin.purge_archive(datetime.now() - timedelta(days=1), me) == 0
    batches: list[int] = []
    assert admin.purge_archive(datetime.now() + timedelta(days=1), me, progress=batches.append) == 5
    assert batches == [2, 2, 1] and counts(small)["archive"] == 0


def test_dlq_retention_deletes_only_older_rows_in_batches_and_audits_each(small: Storage) -> None:
    from sqlalchemy import update

    from chokaq.storage.schema import jobs_dlq

    ids = small.enqueue_many([EnqueueRequest(type="t") for _ in range(7)])
    jobs = small.start("w", small.fetch("w", 7)).started
    for j in jobs:
        assert small.fail(j.lease, FailureReason.FATAL_ERROR, "boom")
    now = datetime.now()
    # Five failed 10 days ago, two an hour ago.
    old, recent = ids[:5], ids[5:]
    small.write(
        lambda c: c.execute(update(jobs_dlq).where(jobs_dlq.c.Id.in_(old)).values(FailedAtUtc=now - timedelta(days=10)))
    )
    small.write(
        lambda c: c.execute(
            update(jobs_dlq).where(jobs_dlq.c.Id.in_(recent)).values(FailedAtUtc=now - timedelta(hours=1))
        )
    )
    admin = AdminStore(small)
    me = Actor("system:retention", "admin")
    failed_before = totals(small)[1]
    assert admin.purge_dlq_older(now - timedelta(days=30), me) == 0
    batches: list[int] = []
    assert admin.purge_dlq_older(now - timedelta(days=7), me, progress=batches.append) == 5
    assert batches == [2, 2, 1]
    assert all(small.get_job(i) is None for i in old)
    assert all(small.get_job(i).location is Location.DLQ for i in recent)  # type: ignore[union-attr]
    # The failure totals are history: retention deletes rows, not counts.
    assert totals(small)[1] == failed_before
    rows, total = admin.list_audit(actor="system:retention")
    assert total == 3
    assert {r["action"] for r in rows} == {"dlq.retention"}
    assert sorted(r["details"]["deleted"] for r in rows) == [1, 2, 2]
    assert all(r["details"]["batch_size"] == BATCH for r in rows)
