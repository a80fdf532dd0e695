"""A worker's circuit breakers in process, on every database: off, the worker never touches the
CircuitBreakers table (it runs, retries, dead-letters and sweeps with the table dropped) and its
claim is the one it always was; on, a type failing 100% opens after the threshold, its jobs stay
Pending with their attempts untouched while another type runs, a handler's own breaker=False
keeps a type out of it, a probe's success closes it, and every change is an event and a metric."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from sqlalchemy import select, text

from chokaq import BreakerPolicy, ChokaQ
from chokaq.domain.breakers import CLOSED, OPEN
from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import FailureReason, Location
from chokaq.storage import BreakerStore
from chokaq.storage.schema import circuit_breakers, jobs_hot
from chokaq.storage.sqlfuncs import utcnow
from tests.conftest import metric_total
from tests.helpers import counts, wait_for
from tests.integration.test_worker import make_app
from tests.integration.test_worker import run_worker as run_worker

BREAKER = {"circuit_breaker": {"enabled": True, "failure_threshold": 3, "window": 60, "open_duration": 6.0}}


def states(app: ChokaQ) -> dict[str, int]:
    return {b.job_type: b.state for b in BreakerStore(app.storage).every()}


def spent(app: ChokaQ, *, while_open: bool = False) -> dict[str, int]:
    """Attempt counts of the "bad" jobs; ``while_open``: read in the transaction that finds the
    breaker still open and before its OpenUntil (else the comparison would not be about it)."""

    def work(c: Any) -> dict[str, int]:
        if while_open:
            row = c.execute(select(circuit_breakers.c.State, circuit_breakers.c.OpenUntilUtc, utcnow())).one()
            now = row[2] if isinstance(row[2], datetime) else datetime.fromisoformat(row[2])
            assert row[0] == OPEN and now < row[1], "OpenDuration ran out before the check"
        return dict(c.execute(select(jobs_hot.c.Id, jobs_hot.c.AttemptCount).where(jobs_hot.c.Type == "bad")).all())

    return app.storage.write(work)


def held_bad(app: ChokaQ) -> bool:
    """A "bad" job Fetched or Processing."""
    return bool(
        app.storage.read(
            lambda c: c.execute(select(jobs_hot.c.Id).where(jobs_hot.c.Type == "bad", jobs_hot.c.Status != 0)).first()
        )
    )


def test_off_the_worker_never_touches_the_breakers_table(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url, retry={"max_attempts": 2})

    @app.job("bad")
    def bad(payload: dict[str, Any]) -> None:
        raise ConnectionError("down")

    @app.job("good")
    def good(payload: dict[str, Any]) -> None: ...

    # Gone: any statement naming it would fail, and the worker would stop or the jobs stay.
    app.storage.write(
        lambda c: c.execute(
            text('DROP TABLE chokaq."CircuitBreakers"' if "postgresql" in db_url else 'DROP TABLE "CircuitBreakers"')
        )
    )
    app.storage.enqueue_many(
        [EnqueueRequest(type="bad") for _ in range(5)] + [EnqueueRequest(type="good") for _ in range(5)]
    )
    w = run_worker(app, with_sweep=True)
    assert w.worker.breakers is None and app.storage._claimer.breaker is False
    wait_for(lambda: counts(app.storage).get("archive") == 5 and counts(app.storage).get("dlq") == 5)
    assert app.sweep().breaker_expired == 0
    w.stop()
    assert w.worker.failure is None


def test_on_a_failing_type_opens_waits_and_a_probe_closes_it(db_url: str, run_worker: Any) -> None:
    # Retries are due later and announced by no NOTIFY: poll often on PostgreSQL too.
    app = make_app(
        db_url,
        execution=BREAKER,
        retry={"max_attempts": 5, "base_delay": 0.05},
        storage={"idle_polling_interval": 0.05},
    )
    healthy = threading.Event()

    @app.job("bad")
    def bad(payload: dict[str, Any]) -> None:
        if not healthy.is_set():
            raise ConnectionError("down")

    @app.job("good")
    def good(payload: dict[str, Any]) -> None: ...

    @app.job("own", breaker=False)
    def own(payload: dict[str, Any]) -> None:
        raise ConnectionError("always")

    opened = metric_total("chokaq.breaker.changes", type="bad", state="open")
    seen = len(app.bus.recent)
    bad_ids = app.storage.enqueue_many([EnqueueRequest(type="bad") for _ in range(10)])
    w = run_worker(app, concurrency=1)
    wait_for(lambda: states(app).get("bad") == OPEN)
    # The slot may start one more "bad" job between the database opening the breaker and the
    # worker hearing of it (allowed below); count after that run has ended, or the count can miss
    # it and see it later (a CI run did).
    wait_for(lambda: not held_bad(app))
    first = spent(app)
    # Another type keeps running; the breaker=False type is counted by no breaker.
    app.storage.enqueue_many([EnqueueRequest(type="good") for _ in range(5)])
    (own_id,) = app.storage.enqueue_many([EnqueueRequest(type="own")])
    wait_for(lambda: counts(app.storage).get("archive") == 5)
    wait_for(lambda: (j := app.storage.get_job(own_id)) is not None and j.location is Location.DLQ)
    assert "own" not in states(app)
    # The threshold's three failures, and at most one more: the job the one slot started while
    # the third failure was being written. Jobs buffered before it opened went back unstarted.
    assert 3 <= sum(first.values()) <= 3 + 1
    assert spent(app, while_open=True) == first  # nothing more spent while it stays open
    assert metric_total("chokaq.breaker.changes", type="bad", state="open") == opened + 1

    healthy.set()  # the dependency is back: after OpenDuration one probe runs, succeeds, closes it
    wait_for(lambda: all((j := app.storage.get_job(i)) is not None and j.location is Location.ARCHIVE for i in bad_ids))
    assert states(app)["bad"] == CLOSED
    w.stop()
    changes = [(e.data["old"], e.data["new"]) for e in list(app.bus.recent)[seen:] if e.kind == "breaker.changed"]
    # Opened once, closed by the probe that succeeded; a probe run before the dependency came back
    # (a slow machine) would add an open -> half_open -> open round in between.
    assert changes[0] == ("closed", "open") and changes[-2:] == [("open", "half_open"), ("half_open", "closed")]
    assert set(changes[1:-2]) <= {("open", "half_open"), ("half_open", "open")}


def test_past_max_job_age_the_sweep_dead_letters_them_as_circuit_breaker_open(db_url: str) -> None:
    app = make_app(db_url, execution=BREAKER, retry={"max_job_age": 0.5})

    @app.job("bad")
    def bad(payload: dict[str, Any]) -> None: ...

    ids = app.storage.enqueue_many([EnqueueRequest(type="bad") for _ in range(3)])
    for _ in range(3):
        BreakerStore(app.storage).record_failure("bad", BreakerPolicy(failure_threshold=3, open_duration=3600), "w")
    wait_for(lambda: app.sweep().breaker_expired == 3, timeout=10, interval=0.2)
    for i in ids:
        job = app.storage.get_job(i)
        assert job is not None and job.location is Location.DLQ
        assert job.failure_reason == FailureReason.CIRCUIT_BREAKER_OPEN and job.attempt_count == 0
