"""A queue's row exists once a job of it is stored, however the transaction that first met the
queue ended."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError

from chokaq.domain.models import EnqueueRequest
from chokaq.storage import Storage


def names(s: Storage) -> set[str]:
    return {q.name for q in s.list_queues()}


def test_a_queue_first_met_in_a_rolled_back_transaction_still_gets_its_row(storage: Storage) -> None:
    with storage.engine.connect() as conn:
        tx = conn.begin()
        storage.enqueue(EnqueueRequest(type="t", queue="reports"), conn=conn)
        tx.rollback()
    assert "reports" not in names(storage)
    job_id, _ = storage.enqueue(EnqueueRequest(type="t", queue="reports"))
    assert storage.get_job(job_id) is not None
    assert "reports" in names(storage)


def test_a_queue_whose_first_job_failed_to_store_still_gets_its_row(storage: Storage) -> None:
    taken, _ = storage.enqueue(EnqueueRequest(type="t", queue="mail"))
    with pytest.raises(IntegrityError):
        # A new queue and an id already taken: the row and the job roll back together.
        storage.enqueue(EnqueueRequest(type="t", queue="billing"), job_id=taken)
    assert "billing" not in names(storage)
    storage.enqueue(EnqueueRequest(type="t", queue="billing"))
    assert "billing" in names(storage)
