"""The completer (runtime/completer.py) against a real database: outcomes are kept and retried
under its retry policy until recorded, or abandoned to the sweep when the policy says retrying
cannot help."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import JobStatus, Location
from chokaq.runtime import outcomes
from chokaq.runtime.completer import Completer
from chokaq.runtime.outage import Outage
from chokaq.runtime.outcomes import Outcome
from chokaq.runtime.worker_stats import WorkerStats
from chokaq.settings import StorageSettings
from chokaq.storage.store import Storage


class Refused(Exception):
    """Raised by the test's fault injector in place of a database error."""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Storage]:
    s = Storage(f"sqlite:///{tmp_path / 'c.db'}", settings=StorageSettings(transient_retries=0))
    s.upgrade()
    yield s
    s.close()


class Owner:
    """The worker's side of the completer (completer.Owner), recording what it is told."""

    def __init__(self, seen: dict[str, Any]) -> None:
        self.seen = seen

    def recorded(self, finished: list[Outcome]) -> None:
        self.seen["recorded"].extend(finished)

    def abandoned(self, finished: list[Outcome]) -> None:
        self.seen["abandoned"].extend(finished)

    def conflict(self, _transition: str, n: int = 1) -> None:
        self.seen["conflicts"] += n


def run(store: Storage, outcome_of: Any, *, fail_first: int, retryable: bool) -> dict[str, Any]:
    store.enqueue(EnqueueRequest(type="t", payload="{}"))
    [rec] = store.fetch("w1", 1, start=True)
    seen: dict[str, Any] = {"recorded": [], "abandoned": [], "delays_for": [], "conflicts": 0}
    refusals = [fail_first]

    def refuse(op: str) -> None:
        if op in ("complete", "fail", "retry") and refusals[0] > 0:
            refusals[0] -= 1
            raise Refused(f"injected: {op} refused")

    def delay(attempt: int) -> float:
        seen["delays_for"].append(attempt)
        return 0.0

    counts = WorkerStats()
    worker_store = store.for_worker("w1")
    completer = Completer(
        worker_store,
        Owner(seen),
        Outage(60),
        counts,
        retry_delay=delay,
        retryable=lambda exc: retryable and isinstance(exc, Refused),
    )
    store.fault_injector = refuse
    outcome: Outcome = outcome_of(rec)
    asyncio.run(completer.record([outcome]))
    worker_store.close()
    store.fault_injector = None
    seen["counts"], seen["job"] = counts, store.get_job(rec.id)
    return seen


def test_a_success_is_retried_under_the_policy_until_recorded(store: Storage) -> None:
    seen = run(store, lambda rec: outcomes.succeeded(rec, rec.lease), fail_first=3, retryable=True)
    assert seen["delays_for"] == [0, 1, 2]  # one backoff per refusal, the attempt counting up
    assert len(seen["recorded"]) == 1 and seen["abandoned"] == []
    assert seen["counts"].succeeded == 1 and seen["conflicts"] == 0
    assert seen["job"].location is Location.ARCHIVE


def test_a_retry_outcome_is_written_once_the_database_takes_it(store: Storage) -> None:
    seen = run(store, lambda rec: Outcome("retry", rec.lease, rec, delay=0.0), fail_first=1, retryable=True)
    assert seen["delays_for"] == [0] and len(seen["recorded"]) == 1
    assert seen["counts"].retried == 1
    assert seen["job"].status is JobStatus.PENDING


def test_an_error_the_policy_calls_hopeless_abandons_the_outcome_to_the_sweep(store: Storage) -> None:
    seen = run(store, lambda rec: outcomes.succeeded(rec, rec.lease), fail_first=1, retryable=False)
    assert seen["delays_for"] == [] and seen["recorded"] == []
    assert len(seen["abandoned"]) == 1
    assert seen["counts"].succeeded == 0
    assert seen["job"].status is JobStatus.PROCESSING  # left for zombie rescue, not half-moved
