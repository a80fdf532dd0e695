"""Workers in this process against real databases: outcomes, heartbeats, shutdown."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from chokaq import ChokaQ, FatalError, JobContext, ThrottledError
from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import FailureReason, JobStatus, Location
from chokaq.runtime.worker import Worker
from tests.conftest import metric_total, otel_memory
from tests.helpers import age, counts, totals, wait_for

FAST = {
    "execution": {"heartbeat_interval_min": 0.1, "heartbeat_interval_max": 0.15, "shutdown_grace": 0.2},
    "recovery": {"processing_zombie_timeout": 1.0, "fetched_job_timeout": 5},
    "retry": {"base_delay": 0.05, "jitter_max_delay": 0, "max_delay": 0.2},
    "storage": {"polling_interval": 0.05, "listen_notify": True},
}


def make_app(db_url: str, **overrides: Any) -> ChokaQ:
    otel_memory()
    cfg: dict[str, Any] = {k: dict(v) for k, v in FAST.items()}
    for key, value in overrides.items():
        cfg.setdefault(key, {}).update(value)
    app = ChokaQ(storage_url=db_url, **cfg)
    app.storage.upgrade()
    return app


class Running:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.worker.stop()
        self.thread.join(30)
        assert not self.thread.is_alive(), "worker did not stop"


@pytest.fixture
def run_worker() -> Iterator[Any]:
    started: list[Running] = []

    def start(app: ChokaQ, **kw: Any) -> Running:
        r = Running(app.worker(**kw))
        started.append(r)
        return r

    yield start
    for r in started:
        if r.thread.is_alive():
            r.stop()


class Email(BaseModel):
    to: str
    subject: str


def test_malformed_payload_goes_to_dlq_at_once(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url)

    @app.job("email_v1", payload=Email)
    async def send(email: Email) -> None:
        raise AssertionError("must not run")

    from chokaq.domain.models import EnqueueRequest

    job_id, _ = app.storage.enqueue(EnqueueRequest(type="email_v1", payload='{"to": "a@b", "body": "hi"}'))
    w = run_worker(app)
    job = wait_for(lambda: (j := app.storage.get_job(job_id)) and j.location is Location.DLQ and j)
    w.stop()
    assert job.failure_reason == FailureReason.FATAL_ERROR and job.attempt_count == 1
    assert "subject: Field required" in job.error_details and "Traceback" in job.error_details
    assert totals(app.storage) == (0, 1, 0)


def test_retries_with_backoff_then_max_retries_exceeded(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url)
    calls: list[float] = []

    @app.job("flaky")
    def flaky(payload: dict[str, Any]) -> None:
        calls.append(time.monotonic())
        raise ConnectionError("down")

    job_id = app.enqueue("flaky", {})
    w = run_worker(app)
    job = wait_for(lambda: (j := app.storage.get_job(job_id)) and j.location is Location.DLQ and j)
    w.stop()
    assert job.failure_reason == FailureReason.MAX_RETRIES_EXCEEDED and job.attempt_count == 3
    assert "ConnectionError: down" in job.error_details
    assert len(calls) == 3
    assert calls[1] - calls[0] >= 0.05 and calls[2] - calls[1] >= 0.1  # base 0.05 then 0.1
    assert totals(app.storage) == (0, 1, 2)


def test_fatal_error_and_throttling(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url)
    seen: list[float] = []

    @app.job("fatal")
    def fatal(payload: dict[str, Any]) -> None:
        raise FatalError("card declined for good")

    @app.job("throttled")
    async def throttled(payload: dict[str, Any], ctx: JobContext) -> None:
        seen.append(time.monotonic())
        if ctx.attempt == 1:
            raise ThrottledError("slow down", retry_after=0.4)

    fatal_id = app.enqueue("fatal", {})
    thr_id = app.enqueue("throttled", {})
    w = run_worker(app)
    wait_for(lambda: (j := app.storage.get_job(thr_id)) and j.location is Location.ARCHIVE)
    f = wait_for(lambda: (j := app.storage.get_job(fatal_id)) and j.location is Location.DLQ and j)
    w.stop()
    assert f.failure_reason == FailureReason.FATAL_ERROR and f.attempt_count == 1
    assert len(seen) == 2 and seen[1] - seen[0] >= 0.4
    assert app.storage.get_job(thr_id).attempt_count == 2  # type: ignore[union-attr]


def test_execution_timeout(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url)

    @app.job("stuck", timeout=0.2)
    async def stuck(payload: dict[str, Any]) -> None:
        await asyncio.sleep(30)

    job_id = app.enqueue("stuck", {})
    w = run_worker(app)
    job = wait_for(lambda: (j := app.storage.get_job(job_id)) and j.location is Location.DLQ and j)
    w.stop()
    assert job.failure_reason == FailureReason.TIMEOUT
    assert "timeout of 0.2s" in job.error_details


def test_thread_handler_timeout_sets_ctx_cancelled(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url)
    saw_cancel = threading.Event()

    @app.job("stuck_sync", timeout=0.2)
    def stuck_sync(payload: dict[str, Any], ctx: JobContext) -> None:
        if ctx.cancelled.wait(10):  # a cooperative thread handler stops when asked
            saw_cancel.set()

    job_id = app.enqueue("stuck_sync", {})
    w = run_worker(app)
    job = wait_for(lambda: (j := app.storage.get_job(job_id)) and j.location is Location.DLQ and j)
    w.stop()
    assert job.failure_reason == FailureReason.TIMEOUT
    assert saw_cancel.wait(5)


def test_a_handlers_own_timeout_error_is_retried_not_a_job_timeout(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url)
    calls: list[int] = []

    @app.job("flaky_http", timeout=30, max_attempts=2)
    async def flaky_http(payload: dict[str, Any], ctx: JobContext) -> None:
        calls.append(ctx.attempt)
        raise TimeoutError("upstream did not answer")

    job_id = app.enqueue("flaky_http", {})
    w = run_worker(app)
    job = wait_for(lambda: (j := app.storage.get_job(job_id)) and j.location is Location.DLQ and j)
    w.stop()
    assert calls == [1, 2]
    assert job.failure_reason == FailureReason.MAX_RETRIES_EXCEEDED
    assert "TimeoutError: upstream did not answer" in job.error_details


def test_heartbeat_keeps_a_slow_job_alive_past_the_zombie_timeout(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url)
    release = threading.Event()

    @app.job("slow")
    def slow(payload: dict[str, Any]) -> None:
        release.wait(30)  # a plain handler blocking its thread must not starve the heartbeat

    job_id = app.enqueue("slow", {})
    w = run_worker(app)
    wait_for(lambda: app.storage.get_job(job_id).status == JobStatus.PROCESSING)  # type: ignore[union-attr]
    sweeps = []
    deadline = time.monotonic() + 4 * app.settings.recovery.processing_zombie_timeout
    while time.monotonic() < deadline:  # sweeping for four zombie timeouts, every 50 ms
        sweeps.append(app.sweep())
        time.sleep(0.05)
    release.set()
    wait_for(lambda: app.storage.get_job(job_id).location is Location.ARCHIVE)  # type: ignore[union-attr]
    w.stop()
    assert len(sweeps) > 20 and all(s.archived == 0 for s in sweeps)
    assert totals(app.storage) == (1, 0, 0)


@pytest.mark.parametrize("cancel", [False, True])
def test_heartbeat_write_failures(db_url: str, run_worker: Any, cancel: bool) -> None:
    app = make_app(
        db_url,
        execution={"heartbeat_failure_threshold": 3, "cancel_on_heartbeat_failure": cancel},
        recovery={"processing_zombie_timeout": 600},
    )
    release = threading.Event()
    job_type = f"hb_{cancel}_{app.storage.dialect}"

    @app.job(job_type)
    async def slow(payload: dict[str, Any], ctx: JobContext) -> None:
        while not release.is_set():
            await asyncio.sleep(0.02)

    def broken_heartbeats(op: str) -> None:
        if op == "heartbeat":
            raise RuntimeError("injected: heartbeat write refused")

    before = metric_total("chokaq.jobs.heartbeat_failures", type=job_type)
    job_id = app.enqueue(job_type, {})
    app.storage.fault_injector = broken_heartbeats
    w = run_worker(app)
    wait_for(lambda: metric_total("chokaq.jobs.heartbeat_failures", type=job_type) - before >= 3)
    if cancel:
        job = wait_for(lambda: (j := app.storage.get_job(job_id)) and j.location is Location.DLQ and j)
        assert job.failure_reason == FailureReason.HEARTBEAT_FAILURE
        assert "consecutive heartbeat write failures" in job.error_details
    else:
        assert app.storage.get_job(job_id).status == JobStatus.PROCESSING  # type: ignore[union-attr]
        release.set()
        wait_for(lambda: app.storage.get_job(job_id).location is Location.ARCHIVE)  # type: ignore[union-attr]
    release.set()
    w.stop()


def test_graceful_shutdown_releases_the_buffer_and_reschedules(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url)
    started = threading.Event()

    @app.job("coop")
    async def coop(payload: dict[str, Any], ctx: JobContext) -> None:
        started.set()
        while not ctx.is_cancelled():
            await asyncio.sleep(0.01)
        raise asyncio.CancelledError

    ids = [app.enqueue("coop", {"n": i}) for i in range(4)]
    w = run_worker(app, concurrency=1)
    assert started.wait(10)
    wait_for(lambda: counts(app.storage).get("fetched", 0) == 3)
    w.stop()
    for job_id in ids:
        job = app.storage.get_job(job_id)
        assert job is not None and job.status == JobStatus.PENDING and job.worker_id is None
        assert job.attempt_count == 0
    assert totals(app.storage) == (0, 0, 0)
    assert w.worker.stats["conflicts"] == 0


def test_losing_ownership_cancels_the_handler(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url)
    reasons: list[str | None] = []

    @app.job("long")
    async def long(payload: dict[str, Any], ctx: JobContext) -> None:
        try:
            await asyncio.sleep(30)
        finally:
            reasons.append(ctx.cancel_reason)

    job_id = app.enqueue("long", {})
    w = run_worker(app)
    wait_for(lambda: app.storage.get_job(job_id).status == JobStatus.PROCESSING)  # type: ignore[union-attr]

    def bury() -> bool:
        age(app.storage, job_id, 60)
        return app.sweep().archived == 1

    wait_for(bury)
    wait_for(lambda: reasons)
    w.stop()
    assert reasons == ["lost_ownership"]
    assert w.worker.stats["conflicts"] >= 1


def test_a_resurrected_zombie_is_not_run_beside_its_old_run(db_url: str, run_worker: Any) -> None:
    from chokaq.storage.admin import Actor, AdminStore

    # Slow heartbeats, so the worker has not noticed the sweep yet when the job comes back.
    app = make_app(
        db_url,
        execution={"heartbeat_interval_min": 3, "heartbeat_interval_max": 3.5},
        recovery={"processing_zombie_timeout": 10.5},
    )
    release = threading.Event()
    runs: list[int] = []

    @app.job("long")
    async def long(payload: dict[str, Any], ctx: JobContext) -> None:
        runs.append(ctx.attempt)
        while not release.is_set():
            await asyncio.sleep(0.01)

    job_id = app.enqueue("long", {})
    w = run_worker(app)
    wait_for(lambda: runs)
    age(app.storage, job_id, 60)
    assert app.sweep().archived == 1
    AdminStore(app.storage).resurrect(job_id, Actor("ops", "operator"))
    before = metric_total("chokaq.jobs.state_transition_conflicts", transition="complete")
    # The worker does not claim the job again while its first run is still going.
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        assert runs == [1]
        time.sleep(0.02)
    release.set()
    wait_for(lambda: (j := app.storage.get_job(job_id)) and j.location is Location.ARCHIVE)
    w.stop()
    assert runs == [1, 1]
    # The first run's late success was refused by the fence; the second one archived the job.
    assert metric_total("chokaq.jobs.state_transition_conflicts", transition="complete") - before == 1
    assert totals(app.storage) == (1, 0, 0)


def test_new_work_wakes_an_idle_worker_before_its_next_poll(db_url: str, run_worker: Any) -> None:
    # A poll interval far beyond the test's patience: only a wake-up (same-process announcement,
    # or LISTEN/NOTIFY on PostgreSQL) can start the job in time.
    app = make_app(db_url, storage={"polling_interval": 300})
    done = threading.Event()

    @app.job("ping")
    async def ping(payload: dict[str, Any]) -> None:
        done.set()

    w = run_worker(app)
    wait_for(lambda: w.worker.stats["fetches"] >= 1)  # its first fetch found nothing: now it idles
    app.enqueue("ping", {})
    assert done.wait(20), "the idle worker was not woken by the enqueue"
    w.stop()


def test_an_idle_worker_starts_what_it_claims_without_a_fetched_step(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url)
    ops: list[str] = []
    app.storage.fault_injector = ops.append
    attempts: list[int] = []

    @app.job("quick")
    async def quick(payload: dict[str, Any], ctx: JobContext) -> None:
        attempts.append(ctx.attempt)

    w = run_worker(app, concurrency=4)
    for n in range(1, 4):
        app.enqueue("quick", {})
        wait_for(lambda n=n: totals(app.storage)[0] == n)  # type: ignore[misc]
    w.stop()
    assert attempts == [1, 1, 1]
    # Idle slots: each job went Pending -> Processing in its claim; no start statement ran.
    assert "start" not in ops and ops.count("fetch") >= 3, ops
    assert w.worker.stats["conflicts"] == 0


def test_bursts_never_strand_jobs_in_the_buffer(db_url: str, run_worker: Any) -> None:
    """Claims for idle slots and buffered starts share the slots. A claim that comes back short
    frees the slots it held; a starter waiting for them must hear of it, or jobs already in the
    buffer wait for a handler that will never finish (seen as a hung benchmark at the end of a
    backlog). Each burst's end is another chance for that race."""
    app = make_app(
        db_url,
        execution={"concurrency": 4, "fetch_batch_size": 4, "prefetch": 4},
        # Only the same-process wake-up starts a burst: a poll cannot rescue a stranded buffer.
        storage={"polling_interval": 300, "listen_notify": False},
    )
    seen: list[str] = []

    @app.job("noop")
    async def noop(payload: dict[str, Any], ctx: JobContext) -> None:
        seen.append(ctx.job_id)

    w = run_worker(app, concurrency=4)
    for burst in range(1, 41):
        app.storage.enqueue_many([EnqueueRequest(type="noop", payload="{}") for _ in range(100)])
        wait_for(lambda b=burst: len(seen) == 100 * b, timeout=10)  # type: ignore[misc]
    w.stop()
    assert len(set(seen)) == len(seen) == 4000


def test_a_slow_finaliser_holds_back_new_starts(db_url: str, run_worker: Any) -> None:
    """Handlers that return at once free their slots before their outcomes are written. When
    writing lags, the worker must stop starting jobs rather than pile up Processing rows."""
    app = make_app(db_url, execution={"concurrency": 4, "prefetch": 12, "fetch_batch_size": 4})
    ran: list[str] = []

    @app.job("instant")
    async def instant(payload: dict[str, Any], ctx: JobContext) -> None:
        ran.append(ctx.job_id)

    def slow_completes(op: str) -> None:
        if op == "complete":
            time.sleep(0.05)

    app.storage.fault_injector = slow_completes
    ids = [app.enqueue("instant", {}) for _ in range(60)]
    w = run_worker(app)
    peak = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and totals(app.storage)[0] < len(ids):
        peak = max(peak, len(w.worker.running))
        time.sleep(0.002)
    w.stop()
    assert sorted(ran) == sorted(ids)  # each ran once
    assert totals(app.storage)[0] == len(ids)
    assert 4 < peak <= 8, peak  # outcomes did queue up, but never past 2 x Concurrency (not Concurrency + Prefetch)


def test_a_reconcile_settles_rows_claimed_by_replies_the_worker_never_got(db_url: str, run_worker: Any) -> None:
    """What a lost claim reply leaves: rows under the worker's id that it holds no record of. After
    an ambiguous call the worker adopts the Fetched one (it runs once) and gives the never-started
    Processing one back to Pending with its attempt given back; nothing becomes a zombie."""
    app = make_app(db_url)
    runs: list[str] = []

    @app.job("rec")
    def rec(payload: dict[str, Any], ctx: JobContext) -> None:
        runs.append(ctx.job_id)

    s = app.storage
    # The worker serves another queue: the rows below are claimed under its id from here, after
    # it started (rows older than its start are not its own: a predecessor with the same name).
    r = run_worker(app, queues=["elsewhere"], worker_id="w-lost-replies")
    wait_for(lambda: r.worker.started_at is not None)
    fetched_id, _ = s.enqueue(EnqueueRequest(type="rec"))
    (fetched,) = s.fetch(r.worker.id, 1)
    processing_id, _ = s.enqueue(EnqueueRequest(type="rec"))
    (processing,) = s.fetch(r.worker.id, 1, start=True)
    assert (fetched.id, processing.id, processing.attempt_count) == (fetched_id, processing_id, 1)
    r.worker.reconciler.suspect()  # as a claim whose reply was lost leaves it
    wait_for(lambda: counts(s).get("archive") == 1 and counts(s).get("pending") == 1)
    r.stop()
    assert runs == [fetched_id]
    done = s.get_job(fetched_id)
    assert done is not None and done.location is Location.ARCHIVE and done.attempt_count == 1
    back = s.get_job(processing_id)
    assert back is not None and back.status == JobStatus.PENDING and back.worker_id is None
    assert back.attempt_count == 0  # it never ran: the attempt is given back
    assert counts(s)["dlq"] == 0


def test_a_cancel_through_the_workers_own_process_stops_the_handler_at_once(db_url: str, run_worker: Any) -> None:
    """`chokaq dev`, the Functions app: the API and a worker in one process. No heartbeat comes
    within the test, and on SQLite no NOTIFY: only the in-process wake-up can stop the handler."""
    from chokaq.storage.admin import Actor, AdminStore

    app = make_app(
        db_url,
        execution={"heartbeat_interval_min": 300, "heartbeat_interval_max": 300},
        recovery={"processing_zombie_timeout": 3600},
        storage={"listen_notify": False},
    )
    reasons: list[str | None] = []

    @app.job("long")
    async def long(payload: dict[str, Any], ctx: JobContext) -> None:
        try:
            await asyncio.sleep(600)
        finally:
            reasons.append(ctx.cancel_reason)

    job_id = app.enqueue("long", {})
    w = run_worker(app)
    wait_for(lambda: job_id in w.worker.executing)
    res = AdminStore(app.storage).cancel([job_id], Actor("ops", "operator"), running=True)
    assert res.was_running == [job_id]
    wait_for(lambda: reasons)
    assert reasons == ["cancelled"]
    wait_for(lambda: "Its handler stopped at" in (app.storage.get_job(job_id).error_details or ""))  # type: ignore[union-attr]
    w.stop()
    assert totals(app.storage) == (0, 1, 0)
    assert w.worker.stats["conflicts"] == 0
