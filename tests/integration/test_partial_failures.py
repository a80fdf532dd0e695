"""Worker calls that commit one step and then fail on the next: nothing that committed may be left
under the worker's id with nobody holding it (found in review; each test fails before its fix)."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError

from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import JobStatus
from chokaq.storage import Storage


def fail_on(storage: Storage, op: str) -> None:
    """Make the next transaction named ``op`` fail with a non-transient error (no replay)."""

    def inject(name: str) -> None:
        if name == op:
            storage.fault_injector = None
            raise OperationalError("injected", {}, RuntimeError(f"{op} failed"))

    storage.fault_injector = inject


def test_a_failed_limited_claim_keeps_what_the_main_claim_committed(storage: Storage) -> None:
    storage.update_queue("limited", max_workers=5)
    free = [storage.enqueue(EnqueueRequest(type="t", queue="free"))[0] for _ in range(2)]
    storage.enqueue(EnqueueRequest(type="t", queue="limited"))
    fail_on(storage, "fetch_limited")
    # The main claim committed two jobs to this worker before the MaxWorkers claim failed: they
    # must reach the caller, or they sit Processing under "w" with no handler ever started.
    got = storage.fetch("w", 10, start=True)
    assert sorted(j.id for j in got) == sorted(free)
    assert all(storage.get_job(i).status == JobStatus.PROCESSING for i in free)  # type: ignore[union-attr]


def test_a_lone_failed_limited_claim_still_raises(storage: Storage) -> None:
    storage.update_queue("limited", max_workers=5)
    storage.enqueue(EnqueueRequest(type="t", queue="limited"))
    fail_on(storage, "fetch_limited")
    with pytest.raises(OperationalError):
        storage.fetch("w", 10, start=True)


def test_a_start_that_fails_after_committing_leaves_the_records_as_fetched(storage: Storage) -> None:
    a = storage.enqueue(EnqueueRequest(type="t", queue="open"))[0]
    b = storage.enqueue(EnqueueRequest(type="t", queue="paused"))[0]
    fetched = storage.fetch("w", 10)
    assert {j.id for j in fetched} == {a, b}
    storage.update_queue("paused", paused=True)
    # The start commits for a; b's queue is paused, and the follow-up read for b fails.
    fail_on(storage, "recognise")
    with pytest.raises(OperationalError):
        storage.start("w", fetched)
    # The worker puts the batch back into its buffer; its records must still name the Fetched
    # attempt, or the next start is fenced out and a stays Processing, never run.
    assert all(j.status == JobStatus.FETCHED and j.attempt_count == 0 for j in fetched)
    again = storage.start("w", fetched)
    assert [j.id for j in again.started] == [a] and again.lost == []
    assert again.started[0].attempt_count == 1
    assert again.released == [b]
