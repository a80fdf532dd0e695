"""Worker calls that commit one step and then fail on the next: nothing that committed may be left
under the worker's id with nobody holding it (found in review; each test fails before its fix)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import threading
import time
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from chokaq import ChokaQ
from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import JobStatus, Location
from chokaq.runtime.worker import Worker
from chokaq.storage import Storage
from tests.helpers import age, wait_for
from tests.integration.test_worker import Running, make_app


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


def test_a_failed_read_of_the_maxworkers_queues_strands_nothing(storage: Storage) -> None:
    # The claim re-reads the list of MaxWorkers queues about once a second, on a pooled connection
    # of its own. When that read failed after the main claim had committed (the database going
    # away in between, as the fault test's refuse mode makes it), fetch raised and the claimed jobs
    # sat Processing under the worker, never started and never reconciled (no reply was lost, so
    # nothing was ambiguous), until the sweep buried them as Zombies.
    free = [storage.enqueue(EnqueueRequest(type="t", queue="free"))[0] for _ in range(2)]
    fail_on(storage, "limited_queues")
    try:
        got = {j.id for j in storage.fetch("w", 10, start=True)}
    except OperationalError:
        got = set()
    # Whatever the call returned, nothing is left under "w" that the caller was not handed.
    assert {j.id for j in storage.owned("w")} <= got
    assert all(storage.get_job(i).status == JobStatus.PENDING for i in free if i not in got)  # type: ignore[union-attr]


def test_a_worker_whose_claim_fails_after_committing_still_runs_the_job(db_url: str) -> None:
    # The same failure through a real worker: the job must run, not sit Processing under the
    # worker until the sweep buries it as a Zombie that never ran.
    app = make_app(db_url, storage={"listen_notify": False})  # polls every 50 ms
    ran: list[str] = []

    @app.job("t")
    def t(payload: dict[str, Any], ctx: Any) -> None:
        ran.append(ctx.job_id)

    job = app.storage.enqueue(EnqueueRequest(type="t"))[0]
    fail_on(app.storage, "limited_queues")  # the worker's first claim
    running = Running(app.worker())
    try:
        # Twenty more claims are plenty for a job that is due: by then it ran, or it was stranded.
        wait_for(lambda: ran or running.worker.stats["fetches"] >= 20, timeout=30)
        wait_for(lambda: not running.worker.busy, timeout=30)
    finally:
        running.stop()
    assert ran == [job]
    assert app.storage.owned(running.worker.id) == []
    assert app.storage.get_job(job).location == Location.ARCHIVE  # type: ignore[union-attr]
    app.close()


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


def test_a_start_recognised_late_hands_its_jobs_over_with_a_fresh_lease(storage: Storage) -> None:
    # A start that committed unheard is recognised by the next start of the same batch, which may
    # come seconds later (the database away, the replays failing). Its handlers begin then: the
    # lease must be as fresh as a start's, or the sweep takes the running jobs for zombies of the
    # lost start's age (a refuse-mode run of the fault test buried 6 jobs that had run; its logs
    # fit this).
    storage.enqueue_many([EnqueueRequest(type="t") for _ in range(2)])
    fetched = storage.fetch("w", 10)
    storage.start("w", [copy.copy(j) for j in fetched])  # committed; the worker never heard
    for j in fetched:
        age(storage, j.id, 30)  # the replay that recognises it comes late
    again = storage.start("w", fetched)
    assert sorted(j.id for j in again.started) == sorted(j.id for j in fetched)
    assert all(j.attempt_count == 1 for j in again.started)  # counted once, by the lost start
    swept = storage.sweep(fetched_timeout=60, zombie_timeout=10, max_attempts=3)
    assert (swept.archived, swept.retried_zombies) == (0, 0)
    assert all(storage.get_job(j.id).status == JobStatus.PROCESSING for j in fetched)  # type: ignore[union-attr]


def lost_start_scenario(db_url: str, fail_for: float) -> tuple[ChokaQ, Worker, str, list[str], list[float]]:
    """A worker with one slot, a slow job in it and job ``t`` in its buffer. The first start of
    ``t`` commits (out of band, as the worker's own would) and then fails, and so does every start
    for ``fail_for`` seconds (the database refusing connections, in the fault test). Returns the
    app, the worker (not started), t's id, the ids that ran and when the failing ends."""
    app = make_app(db_url, storage={"listen_notify": False}, recovery={"scan_interval": 0.1})
    ran: list[str] = []

    @app.job("slow")
    async def slow(payload: dict[str, Any]) -> None:
        await asyncio.sleep(0.3)  # holds the only slot, so the next job is claimed into the buffer

    @app.job("t")
    def t(payload: dict[str, Any], ctx: Any) -> None:
        ran.append(ctx.job_id)

    app.storage.enqueue(EnqueueRequest(type="slow", priority=100))
    job = app.storage.enqueue(EnqueueRequest(type="t"))[0]
    worker = app.worker(concurrency=1, with_sweep=True)
    failing_until: list[float] = []

    def inject(op: str) -> None:
        if op != "start":
            return
        if not failing_until:
            other = Storage(db_url)
            other.start(worker.id, [j for j in other.owned(worker.id) if j.status == JobStatus.FETCHED])
            other.close()
            failing_until.append(time.monotonic() + fail_for)
        if time.monotonic() < failing_until[0]:
            raise OperationalError("injected", {}, RuntimeError("start failed"))

    app.storage.fault_injector = inject
    return app, worker, job, ran, failing_until


def test_a_start_that_committed_unheard_keeps_its_lease_while_the_worker_retries_it(db_url: str) -> None:
    # The worker holds t in its buffer as Fetched while the row is Processing; until a start gets
    # through and recognises it, the heartbeat must keep its lease (three zombie timeouts here),
    # or the sweep buries a job whose handler never began.
    app, worker, job, ran, failing_until = lost_start_scenario(db_url, fail_for=3.0)
    running = Running(worker)
    try:
        wait_for(lambda: ran or app.storage.get_job(job).location != Location.HOT, timeout=30)  # type: ignore[union-attr]
        wait_for(lambda: not worker.busy, timeout=30)
    finally:
        running.stop()
    assert failing_until, "the start never ran"
    assert ran == [job], app.storage.get_job(job)
    assert app.storage.get_job(job).location == Location.ARCHIVE  # type: ignore[union-attr]
    app.close()


def test_a_worker_stopping_with_a_start_unheard_gives_its_jobs_back(db_url: str) -> None:
    # Stopped before any start got through: the release at shutdown finds t Processing, not
    # Fetched; it must go back to Pending (attempt given back), not stay under a worker that is gone.
    app, worker, job, ran, failing_until = lost_start_scenario(db_url, fail_for=3600.0)
    running = Running(worker)
    try:
        wait_for(lambda: failing_until, timeout=30)  # the start committed, and failed
    finally:
        running.stop()
    rec = app.storage.get_job(job)
    assert rec is not None and (rec.location, rec.status, rec.worker_id) == (Location.HOT, JobStatus.PENDING, None)
    assert rec.attempt_count == 0 and ran == []
    # The release could not move it, and that is no conflict: the job was ours all along.
    assert worker.counts.conflicts == 0, worker.counts
    app.close()


def test_a_worker_cancelled_during_a_start_gives_its_jobs_back(db_url: str) -> None:
    # run_async cancelled (an embedder's task.cancel, a host's timeout) while a start is in
    # flight: the start still commits in its thread, but the worker never hears of it and its
    # jobs are neither buffered nor running any more. The shutdown must give them back.
    app = make_app(db_url, storage={"listen_notify": False})
    ran: list[str] = []

    @app.job("slow")
    async def slow(payload: dict[str, Any]) -> None:
        await asyncio.sleep(0.3)  # holds the only slot, so t is claimed into the buffer

    @app.job("t")
    def t(payload: dict[str, Any], ctx: Any) -> None:
        ran.append(ctx.job_id)

    app.storage.enqueue(EnqueueRequest(type="slow", priority=100))
    job = app.storage.enqueue(EnqueueRequest(type="t"))[0]
    worker = app.worker(concurrency=1)
    in_start, release = threading.Event(), threading.Event()

    def inject(op: str) -> None:
        if op == "start" and not in_start.is_set():
            other = Storage(db_url)  # the start commits, as the worker's own would ...
            other.start(worker.id, [j for j in other.owned(worker.id) if j.status == JobStatus.FETCHED])
            other.close()
            in_start.set()
            release.wait(30)  # ... and its reply is still on the way when the worker is cancelled
            raise OperationalError("injected", {}, RuntimeError("reply lost"))

    app.storage.fault_injector = inject
    loop = asyncio.new_event_loop()
    task = loop.create_task(worker.run_async())

    def run() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(task)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert in_start.wait(30)
        loop.call_soon_threadsafe(task.cancel)
        wait_for(task.done, timeout=30)  # cancelled: the shutdown ran, with the start unanswered
    finally:
        release.set()
        thread.join(30)
        loop.close()
    rec = app.storage.get_job(job)
    assert rec is not None and (rec.location, rec.status, rec.worker_id) == (Location.HOT, JobStatus.PENDING, None)
    assert rec.attempt_count == 0 and ran == []
    app.close()
