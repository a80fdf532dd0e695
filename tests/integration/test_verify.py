"""``@app.job(..., verify=fn)``: a zombie buried by a sweep that has the handler loaded is judged by
``fn(payload, steps)``: done goes to the archive, not done back to Pending, unknown (or a verify
that raises, or answers nonsense) stays in the DLQ; every verdict audited as system:verify. A sweep
without the handlers (the Functions timer, `chokaq sweep`) leaves every zombie for a human. Each
case with a plain verify and with an ``async def`` one."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from sqlalchemy import select

from chokaq import ChokaQ
from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import FailureReason, JobStatus, Location
from chokaq.domain.steps import StepRecord
from chokaq.runtime.sweeper import run_sweep
from chokaq.storage.schema import audit_log
from chokaq.storage.steps import finish_step, start_step
from tests.helpers import age, wait_for
from tests.integration.test_worker import make_app

KINDS = ["sync", "async"]


def _app(db_url: str, seen: list[tuple[Any, list[StepRecord]]], kind: str = "sync") -> ChokaQ:
    app = make_app(db_url)

    def answer(payload: dict[str, Any], steps: list[StepRecord]) -> str:
        seen.append((payload, steps))
        if payload["answer"] == "raise":
            raise RuntimeError("the provider is down")
        return str(payload["answer"])

    async def verify_async(payload: dict[str, Any], steps: list[StepRecord]) -> str:
        await asyncio.sleep(0.001)  # as a call to an async client would: the answer comes later
        return answer(payload, steps)

    verify = answer if kind == "sync" else verify_async

    @app.job("charge_v1", queue="payments", verify=verify)
    async def charge(payload: dict[str, Any]) -> None:
        return None

    return app


def _zombie(app: ChokaQ, answer: str) -> str:
    s = app.storage
    job_id, _ = s.enqueue(EnqueueRequest(type="charge_v1", queue="payments", payload=json.dumps({"answer": answer})))
    (rec,) = s.start("ghost", s.fetch("ghost", 1, ["payments"])).started
    assert start_step(s, rec.lease, "charge", again=False) and finish_step(s, rec.lease, "charge", '"ch_1"')
    age(s, job_id, 3600)
    return job_id


def _verdicts(app: ChokaQ) -> dict[str, tuple[str, dict[str, Any]]]:
    rows = app.storage.read(lambda c: c.execute(select(audit_log).where(audit_log.c.Action == "dlq.verify")).all())
    return {json.loads(r.JobIds)[0]: (r.Actor, json.loads(r.Details)) for r in rows}


@pytest.mark.parametrize("kind", KINDS)
def test_each_verdict_ends_where_it_should(db_url: str, kind: str) -> None:
    seen: list[tuple[Any, list[StepRecord]]] = []
    app = _app(db_url, seen, kind)
    done, not_done, unknown = _zombie(app, "done"), _zombie(app, "not_done"), _zombie(app, "unknown")
    raised, nonsense = _zombie(app, "raise"), _zombie(app, "maybe")
    result = run_sweep(app.storage, app.settings, handlers=app.handlers)
    assert result.archived == 5
    where = {j: app.storage.get_job(j) for j in (done, not_done, unknown, raised, nonsense)}
    assert where[done].location is Location.ARCHIVE  # type: ignore[union-attr]
    assert where[not_done].location is Location.HOT and where[not_done].status is JobStatus.PENDING  # type: ignore[union-attr]
    for j in (unknown, raised, nonsense):
        assert where[j].location is Location.DLQ and where[j].failure_reason is FailureReason.ZOMBIE  # type: ignore[union-attr]
    # verify saw the payload and the journal.
    assert all([(s.name, s.state, s.value()) for s in steps] == [("charge", "done", "ch_1")] for _, steps in seen)
    verdicts = _verdicts(app)
    assert {j: v[1]["verdict"] for j, v in verdicts.items()} == {
        done: "done",
        not_done: "not_done",
        unknown: "unknown",
        raised: "unknown",
        nonsense: "unknown",
    }
    assert {v[0] for v in verdicts.values()} == {"system:verify"}
    assert verdicts[raised][1]["note"] == "verify raised RuntimeError"
    assert "not one of done, not_done, unknown" in verdicts[nonsense][1]["note"]
    # Counters: the done one counts as succeeded, no longer failed.
    stats = {q.queue: q for q in app.storage.queue_stats()}["payments"]
    assert (stats.succeeded_total, stats.failed_total) == (1, 3)
    app.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_sweep_without_the_handlers_leaves_every_zombie_for_a_human(db_url: str, kind: str) -> None:
    app = _app(db_url, seen := [], kind)
    job_id = _zombie(app, "done")
    assert run_sweep(app.storage, app.settings).archived == 1
    assert app.storage.get_job(job_id).location is Location.DLQ  # type: ignore[union-attr]
    assert seen == [] and _verdicts(app) == {}
    app.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_workers_own_sweep_judges_the_zombies_of_its_handlers(db_url: str, run_worker: Any, kind: str) -> None:
    app = _app(db_url, seen := [], kind)
    app.settings.recovery.scan_interval = 0.1
    job_id = _zombie(app, "done")
    run_worker(app, queues=["other"], with_sweep=True)  # serves another queue: only its sweep acts here
    wait_for(lambda: (r := app.storage.get_job(job_id)) is not None and r.location is Location.ARCHIVE)
    assert len(seen) == 1 and _verdicts(app)[job_id][1]["verdict"] == "done"
    # Out of the DLQ, it still counts in its crash incident (storage/incidents.py).
    assert [(z["worker"], z["jobs"]) for z in _verdicts(app)[job_id][1]["zombies"]] == [("ghost", 1)]


def test_an_async_verify_is_answered_when_the_sweep_is_called_from_async_code(db_url: str) -> None:
    """``run_sweep`` called on a thread that runs an event loop (an app's own async code): the async
    verify cannot be run on that loop from synchronous code, and is run on a loop of its own."""
    app = _app(db_url, seen := [], "async")
    done, not_done = _zombie(app, "done"), _zombie(app, "not_done")

    async def sweep_from_a_coroutine() -> None:
        run_sweep(app.storage, app.settings, handlers=app.handlers)

    asyncio.run(sweep_from_a_coroutine())
    assert app.storage.get_job(done).location is Location.ARCHIVE  # type: ignore[union-attr]
    assert app.storage.get_job(not_done).status is JobStatus.PENDING  # type: ignore[union-attr]
    assert len(seen) == 2 and {v[1]["verdict"] for v in _verdicts(app).values()} == {"done", "not_done"}
    app.close()
