"""Circuit breakers in the database, on every database: the claim leaves out a type whose breaker
is not closed (its jobs stay Pending, attempts untouched) while other types run; an open breaker
past OpenDuration lets HalfOpenProbes jobs through; a probe's success closes it, a failure opens it
again; an operator's close is audited; the sweep moves jobs past Retry.MaxJobAge to the DLQ as
CircuitBreakerOpen with exact stats."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from chokaq.domain.breakers import CLOSED, HALF_OPEN, OPEN, BreakerPolicy
from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import FailureReason
from chokaq.storage import Storage
from chokaq.storage.admin import Actor
from chokaq.storage.breakers import BreakerStore
from chokaq.storage.schema import audit_log, jobs_dlq, jobs_hot
from tests.helpers import counts, totals

OPS = Actor("ops:alice", "operator")
POLICY = BreakerPolicy(failure_threshold=3, window=60, open_duration=0.5, half_open_probes=2)


@pytest.fixture
def s(db_url: str) -> Iterator[Storage]:
    storage = Storage(db_url)
    storage.upgrade()
    storage._claimer.breaker = True
    try:
        yield storage
    finally:
        storage.close()


def state_of(store: BreakerStore, job_type: str) -> int:
    return {r.job_type: r.state for r in store.every()}[job_type]


def open_breaker(store: BreakerStore, job_type: str = "bad") -> None:
    changes = [store.record_failure(job_type, POLICY, "w") for _ in range(POLICY.failure_threshold)]
    assert [c.new if c else None for c in changes] == [None, None, "open"]


def test_an_open_breaker_keeps_its_type_pending_with_attempts_untouched_while_others_run(s: Storage) -> None:
    store = BreakerStore(s)
    s.enqueue_many([EnqueueRequest(type="bad") for _ in range(5)] + [EnqueueRequest(type="good") for _ in range(5)])
    open_breaker(store)
    assert state_of(store, "bad") == OPEN
    claimed = s.fetch("w1", 100)
    assert sorted(j.type for j in claimed) == ["good"] * 5
    rows = s.read(
        lambda c: c.execute(select(jobs_hot.c.Status, jobs_hot.c.AttemptCount).where(jobs_hot.c.Type == "bad")).all()
    )
    assert [(r[0], r[1]) for r in rows] == [(0, 0)] * 5
    # While it is open and OpenDuration has not passed, no probe either.
    assert store.claim_probes("w1", "bad", POLICY, None) == ([], None)


def test_half_open_lets_the_probes_through_and_a_success_closes_it(s: Storage) -> None:
    store = BreakerStore(s)
    s.enqueue_many([EnqueueRequest(type="bad") for _ in range(5)])
    open_breaker(store)
    time.sleep(POLICY.open_duration + 0.1)
    jobs, change = store.claim_probes("w1", "bad", POLICY, None)
    assert len(jobs) == 2 and change is not None and (change.old, change.new) == ("open", "half_open")
    # The probes are in flight: a second worker gets none, and the ordinary claim none either.
    assert store.claim_probes("w2", "bad", POLICY, None) == ([], None)
    assert s.fetch("w2", 100) == []
    assert state_of(store, "bad") == HALF_OPEN
    change = store.record_probe_success("bad", "w1")
    assert change is not None and (change.old, change.new) == ("half_open", "closed")
    assert sorted(j.type for j in s.fetch("w2", 100)) == ["bad"] * 3


def test_a_failed_probe_opens_it_again(s: Storage) -> None:
    store = BreakerStore(s)
    s.enqueue_many([EnqueueRequest(type="bad") for _ in range(3)])
    open_breaker(store)
    time.sleep(POLICY.open_duration + 0.1)
    jobs, _ = store.claim_probes("w1", "bad", POLICY, None)
    assert jobs
    change = store.record_failure("bad", POLICY, "w1")
    assert change is not None and (change.old, change.new) == ("half_open", "open")
    assert store.claim_probes("w1", "bad", POLICY, None) == ([], None)


def test_failures_outside_the_window_do_not_add_up(s: Storage) -> None:
    store = BreakerStore(s)
    policy = BreakerPolicy(failure_threshold=2, window=0.3)
    assert store.record_failure("t", policy, "w") is None
    time.sleep(0.4)
    assert store.record_failure("t", policy, "w") is None
    assert state_of(store, "t") == CLOSED
    assert store.record_failure("t", policy, "w") is not None
    assert state_of(store, "t") == OPEN


def test_an_operator_closes_it_audited(s: Storage) -> None:
    store = BreakerStore(s)
    open_breaker(store)
    state, change = store.close("bad", OPS)
    assert state.state == CLOSED and change is not None and change.new == "closed"
    assert store.close("bad", OPS)[1] is None  # closed already: nothing to do, no second audit row
    rows = s.read(lambda c: c.execute(select(audit_log).where(audit_log.c.Action == "breaker.close")).all())
    assert len(rows) == 1 and rows[0].Actor == "ops:alice"
    assert json.loads(rows[0].Details)["was"] == "open"


def test_jobs_past_max_job_age_behind_an_open_breaker_land_in_the_dlq(s: Storage) -> None:
    store = BreakerStore(s)
    old = s.enqueue_many([EnqueueRequest(type="bad") for _ in range(7)])
    other = s.enqueue_many([EnqueueRequest(type="good")])
    time.sleep(1.1)
    young = s.enqueue_many([EnqueueRequest(type="bad")])
    assert store.expire_waiting(1.0, 3) == []  # no breaker row yet (closed): nothing moves
    open_breaker(store)
    moved = store.expire_waiting(1.0, 3)  # batches of 3: 3 + 3 + 1
    assert sorted(moved) == sorted(old)
    dead = s.read(lambda c: c.execute(select(jobs_dlq.c.Id, jobs_dlq.c.FailureReason, jobs_dlq.c.AttemptCount)).all())
    assert {r[1] for r in dead} == {int(FailureReason.CIRCUIT_BREAKER_OPEN)}
    assert {r[2] for r in dead} == {0}
    assert not {r[0] for r in dead} & {*young, *other}
    assert counts(s) == {"pending": 2, "archive": 0, "dlq": 7}
    assert totals(s) == (0, 7, 0)
    assert store.expire_waiting(1.0, 3) == []
