"""The step journal (docs/steps.md) on SQLite and PostgreSQL: fenced writes, replay on a later
attempt, unknown outcomes resolved by the handler, bad input refused with nothing written."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from sqlalchemy import update

from chokaq import JobContext, StepInputError, StepOutcomeUnknown, StepOwnershipLost
from chokaq.domain.models import EnqueueRequest, Lease
from chokaq.domain.states import FailureReason, Location
from chokaq.domain.steps import MAX_STEP_NAME_LEN, MAX_STEP_RESULT_CHARS
from chokaq.storage import Storage
from chokaq.storage.schema import jobs_hot
from chokaq.storage.steps import finish_step, load_steps, start_step
from tests.helpers import wait_for
from tests.integration.test_worker import make_app


def _running(s: Storage, worker: str = "w1") -> Lease:
    job_id, _ = s.enqueue(EnqueueRequest(type="t"))
    (rec,) = s.start(worker, s.fetch(worker, 1)).started
    assert rec.id == job_id
    return rec.lease


def _archived(app: Any, run_worker: Any, job_type: str) -> str:
    """Run one job of ``job_type`` on a worker until it is archived; its id."""
    job_id = app.enqueue(job_type, {})
    run_worker(app)
    wait_for(lambda: (r := app.storage.get_job(job_id)) is not None and r.location is Location.ARCHIVE)
    return str(job_id)


def _journal(s: Storage, job_id: str) -> list[tuple[str, int, str, Any]]:
    return [(r.name, r.attempt, r.state, r.value()) for r in load_steps(s, job_id)]


def test_a_step_is_recorded_only_by_the_worker_and_attempt_holding_the_job(storage: Storage) -> None:
    lease = _running(storage)
    stale_attempt = Lease(lease.job_id, lease.worker_id, lease.attempt + 1)
    other_worker = Lease(lease.job_id, "w2", lease.attempt)
    assert not start_step(storage, stale_attempt, "a", again=False)
    assert not start_step(storage, other_worker, "a", again=False)
    assert _journal(storage, lease.job_id) == []
    assert start_step(storage, lease, "a", again=False)
    # A replay of the same start (a lost reply) is this run's own row: accepted, nothing added.
    assert start_step(storage, lease, "a", again=False)
    assert not finish_step(storage, other_worker, "a", '{"x":1}')
    assert _journal(storage, lease.job_id) == [("a", 1, "started", None)]
    assert finish_step(storage, lease, "a", '{"x":1}')
    assert finish_step(storage, lease, "a", '{"x":1}')  # replayed: the same values
    assert _journal(storage, lease.job_id) == [("a", 1, "done", {"x": 1})]
    # The job leaves this worker (to the DLQ here): nothing more is recorded for it.
    assert storage.fail(lease, FailureReason.MAX_RETRIES_EXCEEDED, "boom")
    assert not start_step(storage, lease, "b", again=False)
    assert not finish_step(storage, lease, "a", None)
    assert _journal(storage, lease.job_id) == [("a", 1, "done", {"x": 1})]


def test_three_steps_fail_in_the_third_and_the_retry_replays_the_first_two(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url, retry={"max_attempts": 3})
    ran: list[tuple[int, str]] = []

    def charge(order: str) -> dict[str, str]:
        ran.append((0, "charge"))
        return {"charge": f"ch_{order}"}

    @app.job("three_steps")
    async def three(payload: dict[str, Any], ctx: JobContext) -> None:
        charged = await ctx.step("charge", charge, payload["order"])
        assert charged == {"charge": "ch_42"}
        async with ctx.step("email") as step:
            if not step.done:
                ran.append((ctx.attempt, "email"))
                step.result = "sent"
        assert step.result == "sent"
        async with ctx.step("receipt") as step:
            ran.append((ctx.attempt, "receipt"))
            if ctx.attempt == 1:
                raise RuntimeError("printer on fire")
            step.result = {"receipt": 7}

    job_id = app.enqueue("three_steps", {"order": "42"})
    run_worker(app)
    wait_for(lambda: (r := app.storage.get_job(job_id)) is not None and r.location is Location.ARCHIVE)
    assert ran == [(0, "charge"), (1, "email"), (1, "receipt"), (2, "receipt")]
    journal = load_steps(app.storage, job_id)
    assert [(r.name, r.attempt, r.state, r.value()) for r in journal] == [
        ("charge", 1, "done", {"charge": "ch_42"}),
        ("email", 1, "done", "sent"),
        ("receipt", 2, "done", {"receipt": 7}),
    ]
    assert all(r.done_at_utc is not None and r.started_at_utc is not None for r in journal)


def test_a_thread_handler_uses_the_sync_forms(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url)
    seen: list[Any] = []

    @app.job("sync_steps")
    def sync_steps(payload: dict[str, Any], ctx: JobContext) -> None:
        with ctx.step("one") as step:
            if not step.done:
                step.result = [1, 2]
        seen.append(ctx.step("two", lambda a, b: a + b, 2, 3).run())

    job_id = _archived(app, run_worker, "sync_steps")
    assert seen == [5]
    assert _journal(app.storage, job_id) == [("one", 1, "done", [1, 2]), ("two", 1, "done", 5)]


BAD: list[tuple[str, Any, Any, str]] = [
    ("empty name", "", None, "must not be empty"),
    ("blank name", "   ", None, "must not be empty"),
    ("long name", "x" * (MAX_STEP_NAME_LEN + 1), None, f"at most {MAX_STEP_NAME_LEN} characters"),
    ("not a string", 7, None, "is a string"),
    ("spaces around", " s", None, "start or end with whitespace"),
    ("NUL in the name", "s\x00", None, "must not contain NUL"),
    ("lone surrogate in the name", "s\udc80", None, "lone surrogate"),
    ("not JSON", "s", {1, 2}, "must be JSON"),
    ("NaN", "s", float("nan"), "must be JSON"),
    ("too large", "s", "x" * MAX_STEP_RESULT_CHARS, f"at most {MAX_STEP_RESULT_CHARS} characters"),
]


@pytest.mark.parametrize(("case", "name", "result", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_names_and_results_are_refused_in_the_handler(
    db_url: str, run_worker: Any, case: str, name: Any, result: Any, message: str
) -> None:
    app = make_app(db_url, retry={"max_attempts": 1})
    errors: list[BaseException] = []

    @app.job("bad_step")
    async def bad(payload: dict[str, Any], ctx: JobContext) -> None:
        try:
            async with ctx.step(name) as step:
                step.result = result
        except StepInputError as exc:
            errors.append(exc)

    job_id = _archived(app, run_worker, "bad_step")
    (error,) = errors
    assert isinstance(error, ValueError) and message in str(error)
    # A bad name writes nothing; a bad result leaves the start (the body ran: its outcome is unknown)
    # and never a bad result.
    journal = _journal(app.storage, job_id)
    assert journal == ([] if result is None else [("s", 1, "started", None)])


@pytest.mark.parametrize(("case", "name", "result", "message"), BAD[::3], ids=[b[0] for b in BAD[::3]])
def test_a_thread_handler_meets_the_same_refusals(
    db_url: str, run_worker: Any, case: str, name: Any, result: Any, message: str
) -> None:
    app = make_app(db_url, retry={"max_attempts": 1})
    errors: list[str] = []

    @app.job("bad_step")
    def bad(payload: dict[str, Any], ctx: JobContext) -> None:
        for call in (lambda: ctx.step(name, lambda: result).run(), lambda: ctx.step("s", lambda: 1).run()):
            try:
                call()
            except StepInputError as exc:
                errors.append(str(exc))

    job_id = _archived(app, run_worker, "bad_step")
    if result is None:  # a bad name: refused, then "s" runs as a first step
        assert len(errors) == 1 and message in errors[0]
        assert _journal(app.storage, job_id) == [("s", 1, "done", 1)]
    else:  # a bad result: its start stays (the function ran), and "s" is refused as a repeat
        assert len(errors) == 2 and message in errors[0] and "already ran in this run" in errors[1]
        assert _journal(app.storage, job_id) == [("s", 1, "started", None)]


@pytest.mark.parametrize(
    ("names", "limit", "message"),
    [(["a", "a"], None, "step 'a' already ran in this run: a step name is unique within a job"),
     (["a", "b", "c"], 2, "a job has at most 2 steps")],
    ids=["a name twice in a run", "more steps than a job may have"],
)  # fmt: skip
def test_a_run_refuses_a_repeated_name_and_too_many_steps(
    db_url: str, run_worker: Any, monkeypatch: Any, names: list[str], limit: int | None, message: str
) -> None:
    if limit is not None:
        monkeypatch.setattr("chokaq.runtime.steps.MAX_STEPS_PER_JOB", limit)
    app = make_app(db_url)
    errors: list[str] = []

    @app.job("steps")
    async def steps(payload: dict[str, Any], ctx: JobContext) -> None:
        for i, name in enumerate(names):
            try:
                await ctx.step(name, lambda i=i: i)
            except StepInputError as exc:
                errors.append(str(exc))

    job_id = _archived(app, run_worker, "steps")
    assert errors == [message]
    assert _journal(app.storage, job_id) == [(n, 1, "done", i) for i, n in enumerate(names[:-1])]


def _dead_with_started_step(app: Any, name: str) -> str:
    """A job in the DLQ whose attempt 1 started step ``name`` and never confirmed it (as a crash
    inside the step leaves it)."""
    s = app.storage
    lease = _running(s, "crashed-worker")
    assert start_step(s, lease, "before", again=False) and finish_step(s, lease, "before", '"ok"')
    assert start_step(s, lease, name, again=False)
    assert s.fail(lease, FailureReason.ZOMBIE, "Zombie detected: heartbeat expired")
    return lease.job_id


@pytest.mark.parametrize("choice", ["mark_done", "run_again", "ignore"])
def test_a_started_step_is_unknown_until_the_handler_resolves_it(db_url: str, run_worker: Any, choice: str) -> None:
    from chokaq.storage import Actor, AdminStore

    app = make_app(db_url, retry={"max_attempts": 1})
    ran: list[str] = []
    unknowns: list[StepOutcomeUnknown] = []

    @app.job("t")
    async def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        assert await ctx.step("before", lambda: ran.append("before")) == "ok"
        try:
            await ctx.step("charge", lambda: ran.append("charge") or "charged again")
        except StepOutcomeUnknown as exc:
            unknowns.append(exc)
            if choice == "mark_done":
                await exc.step.mark_done("charged before")
            elif choice == "run_again":
                exc.step.run_again()
            else:
                raise
        assert await ctx.step("charge", lambda: ran.append("charge") or "charged again") in (
            "charged before",
            "charged again",
        )
        await ctx.step("after", lambda: ran.append("after"))

    job_id = _dead_with_started_step(app, "charge")
    AdminStore(app.storage).resurrect(job_id, Actor("ops", "operator"))
    run_worker(app)
    (unknown,) = wait_for(lambda: unknowns)
    assert unknown.record.attempt == 1 and unknown.record.worker_id == "crashed-worker"
    assert "never confirmed" in str(unknown)
    if choice == "ignore":
        wait_for(lambda: (r := app.storage.get_job(job_id)) is not None and r.location is Location.DLQ)
        assert ran == []
        assert _journal(app.storage, job_id) == [("before", 1, "done", "ok"), ("charge", 1, "started", None)]
        return
    wait_for(lambda: (r := app.storage.get_job(job_id)) is not None and r.location is Location.ARCHIVE)
    if choice == "mark_done":
        assert ran == ["after"]
        charge = ("charge", 1, "done", "charged before")
    else:
        assert ran == ["charge", "after"]
        charge = ("charge", 1, "done", "charged again")
    assert _journal(app.storage, job_id) == [("before", 1, "done", "ok"), charge, ("after", 1, "done", None)]


def test_a_worker_that_lost_the_job_cannot_record_a_step_and_its_handler_is_cancelled(
    db_url: str, run_worker: Any
) -> None:
    app = make_app(db_url)
    gate = threading.Event()
    seen: list[Any] = []

    @app.job("stale")
    async def stale(payload: dict[str, Any], ctx: JobContext) -> None:
        await ctx.step("first", lambda: 1)
        while not gate.is_set():
            await asyncio.sleep(0.01)
        try:
            await ctx.step("second", lambda: seen.append("ran second"))
        except StepOwnershipLost as exc:
            seen.append((str(exc), ctx.is_cancelled(), ctx.cancel_reason))
            raise

    job_id = app.enqueue("stale", {})
    run_worker(app)
    wait_for(lambda: len(load_steps(app.storage, job_id)) == 1 and load_steps(app.storage, job_id)[0].state == "done")
    # Another worker takes the job over (as after a zombie retry): this run's lease is stale.
    app.storage.write(lambda c: c.execute(update(jobs_hot).where(jobs_hot.c.Id == job_id).values(WorkerId="w-new")))
    gate.set()
    wait_for(lambda: seen)
    ((message, cancelled, reason),) = seen
    assert "is no longer held by worker" in message and cancelled and reason == "lost_ownership"
    assert _journal(app.storage, job_id) == [("first", 1, "done", 1)]


def test_a_thread_handler_resolves_an_unknown_step_with_a_blocking_mark_done(db_url: str, run_worker: Any) -> None:
    from chokaq.storage import Actor, AdminStore

    app = make_app(db_url, retry={"max_attempts": 1})
    seen: list[Any] = []

    @app.job("t")
    def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        assert ctx.step("before", lambda: "again?").run() == "ok"
        try:
            with ctx.step("charge"):
                seen.append("ran")
        except StepOutcomeUnknown as unknown:
            unknown.step.mark_done({"found": True})
        with ctx.step("charge") as step:
            seen.append((step.done, step.result))

    job_id = _dead_with_started_step(app, "charge")
    AdminStore(app.storage).resurrect(job_id, Actor("ops", "operator"))
    run_worker(app)
    wait_for(lambda: (r := app.storage.get_job(job_id)) is not None and r.location is Location.ARCHIVE)
    assert seen == [(True, {"found": True})]
    assert _journal(app.storage, job_id) == [("before", 1, "done", "ok"), ("charge", 1, "done", {"found": True})]
