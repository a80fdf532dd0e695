"""A queue's row exists once a job of it is stored, however the transaction that first met the
queue ended."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import event
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


def queue_lookups(storage: Storage) -> tuple[list[str], Callable[[], None]]:
    """The statements that read or write Queues, as they reach the driver; call the second to stop."""
    seen: list[str] = []

    def capture(_c: Any, _cur: Any, statement: str, _p: Any, _ctx: Any, _many: bool) -> None:
        if "Queues" in statement:
            seen.append(statement)

    event.listen(storage.engine, "before_cursor_execute", capture)
    return seen, lambda: event.remove(storage.engine, "before_cursor_execute", capture)


def test_a_queue_met_in_callers_transactions_is_looked_up_until_its_row_is_seen_committed(storage: Storage) -> None:
    seen, stop = queue_lookups(storage)
    try:
        for _ in range(3):
            with storage.engine.begin() as conn:
                storage.enqueue(EnqueueRequest(type="t", queue="ledger"), conn=conn)
        # The first created the row; the second found it committed; the third asked nothing.
        assert [s.split()[0] for s in seen] == ["SELECT", "INSERT", "SELECT"], seen
    finally:
        stop()


def test_a_bulk_enqueue_to_a_new_queue_looks_its_row_up_once(storage: Storage) -> None:
    seen, stop = queue_lookups(storage)
    try:
        storage.enqueue_many(
            [EnqueueRequest(type="t", queue="bulk") for _ in range(50)]
            + [EnqueueRequest(type="t", queue="bulk", idempotency_key=f"k{i}") for i in range(3)]
        )
        assert [s.split()[0] for s in seen] == ["SELECT", "INSERT"], seen
    finally:
        stop()
    assert "bulk" in names(storage)
