"""Job logs and progress: what a handler says (ctx.log, ctx.progress, and records of the logging
module emitted inside it) is kept with its job, bounded and redacted, written by the heartbeat
statement the worker already sends and by the statement that ends the attempt."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from chokaq import ChokaQ, JobContext
from chokaq.domain.states import Location
from chokaq.operations.job_out import JobOut
from chokaq.storage import AdminStore, JobFilter
from chokaq.storage import statements as st
from tests.helpers import wait_for
from tests.integration.test_worker import make_app

APP_LOG = logging.getLogger("tests.joblogs.app")


@pytest.fixture(autouse=True)
def _app_logger_at_info() -> Iterator[None]:
    # The root logger may stand at WARNING under pytest: records a logger drops never reach any handler.
    before = APP_LOG.level
    APP_LOG.setLevel(logging.DEBUG)
    yield
    APP_LOG.setLevel(before)


def _out(app: ChokaQ, job_id: str) -> dict[str, Any]:
    rec = app.storage.get_job(job_id)
    assert rec is not None
    return JobOut.from_record(rec).model_dump()


def _archived(app: ChokaQ, *ids: str) -> None:
    def done() -> bool:
        return all((r := app.storage.get_job(i)) is not None and r.location is Location.ARCHIVE for i in ids)

    wait_for(done, timeout=60)


def test_a_handlers_lines_and_progress_reach_the_archive(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url, retry={"max_attempts": 3})
    runs: list[int] = []

    @app.job("steps_v1")
    async def steps(payload: dict[str, Any], ctx: JobContext) -> None:
        runs.append(ctx.attempt)
        ctx.log("fetched rows", rows=3, source="s3")
        APP_LOG.info("parsed %d rows", 3)
        APP_LOG.debug("not kept")  # below Execution.JobLogLevel (INFO)
        ctx.progress(2, 3, note="two of three")
        if len(runs) == 1:
            raise RuntimeError("first attempt fails")
        ctx.progress(3, 3)

    job_id = app.enqueue("steps_v1", {})
    run_worker(app)
    _archived(app, job_id)
    out = _out(app, job_id)
    logs = out["logs"]
    # The latest attempt's lines, none of the worker's own (its "attempt 1 failed, retry" line).
    assert logs["attempt"] == 2 and logs["dropped"] == 0 and logs["worker"] == out["worker_id"]
    assert [(line["level"], line["logger"], line["message"], line["fields"]) for line in logs["lines"]] == [
        ("INFO", None, "fetched rows", {"rows": 3, "source": "s3"}),
        ("INFO", "tests.joblogs.app", "parsed 3 rows", None),
    ]
    assert out["progress"]["done"] == 3 and out["progress"]["total"] == 3 and out["progress"]["note"] is None
    # Lists stay light: neither logs nor progress is read for a page.
    page = AdminStore(app.storage).list_jobs(Location.ARCHIVE, JobFilter())
    assert page.items[0].logs is None and page.items[0].progress is None


def test_a_failed_attempts_logs_travel_to_the_dlq(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url, retry={"max_attempts": 1})

    @app.job("doomed_v1")
    def doomed(payload: dict[str, Any], ctx: JobContext) -> None:  # a plain function, on its thread
        APP_LOG.warning("about to fail")
        ctx.progress(1, 10)
        try:
            raise ValueError("boom")
        except ValueError:
            APP_LOG.exception("caught and re-raised")
            raise

    job_id = app.enqueue("doomed_v1", {})
    run_worker(app)
    wait_for(lambda: (r := app.storage.get_job(job_id)) is not None and r.location is Location.DLQ)
    out = _out(app, job_id)
    lines = out["logs"]["lines"]
    assert [line["level"] for line in lines] == ["WARNING", "ERROR"]
    assert (
        lines[1]["message"].startswith("caught and re-raised\nTraceback") and "ValueError: boom" in lines[1]["message"]
    )
    assert out["progress"]["done"] == 1 and out["progress"]["total"] == 10


class _HeartbeatCount:
    """Counts the worker's heartbeat calls (ticks) and the heartbeat statements its executor sends."""

    def __init__(self, app: ChokaQ) -> None:
        self.ticks = 0
        self.statements = 0
        self.with_logs = 0
        self.lock = threading.Lock()
        storage = app.storage
        beat = storage.heartbeat
        executor = storage.tx.executor
        execute = executor._execute
        shapes = {(g, logs, progress) for g in range(3) for logs in (False, True) for progress in (False, True)}
        plain = {id(st.heartbeat_statement(g)) for g in range(3)} | {
            id(st.heartbeat_statement(g, False, False)) for g in range(3)
        }
        noted = {id(st.heartbeat_statement(*shape)) for shape in shapes} - plain

        def counted_beat(*args: Any, **kw: Any) -> Any:
            with self.lock:
                self.ticks += 1
            return beat(*args, **kw)

        def counted_execute(link: Any, stmt: Any, params: Any, **kw: Any) -> Any:
            if id(stmt) in plain or id(stmt) in noted:
                with self.lock:
                    self.statements += 1
                    self.with_logs += id(stmt) in noted
            return execute(link, stmt, params, **kw)

        storage.heartbeat = counted_beat  # type: ignore[method-assign]
        executor._execute = counted_execute  # type: ignore[method-assign]


def test_ten_thousand_lines_stay_bounded_and_cost_no_extra_statement(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url)
    limits = app.settings.execution

    @app.job("chatty_v1")
    async def chatty(payload: dict[str, Any], ctx: JobContext) -> None:
        for i in range(10_000):
            if i % 2:
                ctx.log(f"line {i}", i=i)
            else:
                APP_LOG.info("line %d", i)
            if i % 500 == 499:
                ctx.progress(i + 1, 10_000)
                await asyncio.sleep(0.05)  # about 1 s in all: several heartbeat ticks

    @app.job("quiet_v1")
    def quiet(payload: dict[str, Any]) -> None:
        time.sleep(1.5)  # runs beside the chatty one: its lease rides in the same ticks, with no logs

    count = _HeartbeatCount(app)
    quiet_id = app.enqueue("quiet_v1", {})
    job_id = app.enqueue("chatty_v1", {})
    run_worker(app)
    _archived(app, job_id, quiet_id)
    rec = app.storage.get_job(job_id)
    assert rec is not None and rec.logs is not None
    assert len(rec.logs) <= limits.job_log_max_chars and rec.logs.isascii()
    logs = _out(app, job_id)["logs"]
    assert len(logs["lines"]) <= limits.job_log_max_lines
    assert logs["dropped"] + len(logs["lines"]) == 10_000
    assert logs["lines"][-1]["message"] == "line 9999"  # the newest kept, the oldest dropped
    assert _out(app, job_id)["progress"]["done"] == 10_000
    assert _out(app, quiet_id)["logs"] is None
    # One heartbeat statement per tick, whether or not a running job had new lines; some had.
    assert count.ticks > 0 and count.statements == count.ticks, (count.ticks, count.statements)
    assert count.with_logs > 0


def test_logging_records_go_to_the_job_that_emitted_them_with_40_running(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url, execution={"concurrency": 40})
    lock = threading.Lock()
    started: set[str] = set()
    LINES = 25

    def all_started() -> bool:
        with lock:
            return len(started) >= 40

    @app.job("async_logger_v1")
    async def async_logger(payload: dict[str, Any]) -> None:
        me = payload["me"]
        with lock:
            started.add(me)
        for i in range(LINES):
            APP_LOG.info("from %s line %d", me, i)
            await asyncio.sleep(0.01 if all_started() else 0.05)

    @app.job("thread_logger_v1")
    def thread_logger(payload: dict[str, Any]) -> None:
        me = payload["me"]
        with lock:
            started.add(me)
        for i in range(LINES):
            logging.getLogger(f"tests.joblogs.app.{me}").info("from %s line %d", me, i)
            time.sleep(0.01 if all_started() else 0.05)

    ids = {}
    for n in range(20):
        ids[f"a{n}"] = app.enqueue("async_logger_v1", {"me": f"a{n}"})
        ids[f"t{n}"] = app.enqueue("thread_logger_v1", {"me": f"t{n}"})
    run_worker(app)
    _archived(app, *ids.values())
    assert len(started) == 40
    for me, job_id in ids.items():
        lines = _out(app, job_id)["logs"]["lines"]
        assert [line["message"] for line in lines] == [f"from {me} line {i}" for i in range(LINES)], me


def test_each_write_keeps_what_it_does_not_carry(storage: Any) -> None:
    """The storage's four writes of a job's notes: a heartbeat sets only the jobs it names (the
    others keep theirs), and the archive, the DLQ move and the retry carry the rest."""
    from chokaq.domain.job_logs import Notes
    from chokaq.domain.models import EnqueueRequest
    from chokaq.domain.states import FailureReason
    from chokaq.storage.store import Completion

    ids = storage.enqueue_many([EnqueueRequest(type="t") for _ in range(4)])
    jobs = {j.id: j for j in storage.fetch("w", 4, start=True)}
    a, b, c, d = (jobs[i] for i in ids)
    leases = [j.lease for j in jobs.values()]
    assert storage.heartbeat("w", leases, {a.id: Notes("A1", "PA1"), b.id: Notes("B1", None)}) == set(ids)
    assert storage.heartbeat("w", leases, {b.id: Notes(None, "PB2")}) == set(ids)
    assert storage.heartbeat("w", leases) == set(ids)
    read = {i: storage.get_job(i) for i in ids}
    assert [(read[i].logs, read[i].progress) for i in ids] == [("A1", "PA1"), ("B1", "PB2"), (None, None), (None, None)]

    assert storage.complete("w", [Completion(a.lease, 1), Completion(b.lease, 1, Notes("B3", None))]) == {a.id, b.id}
    assert storage.fail(c.lease, FailureReason.FATAL_ERROR, "boom", None, Notes("C1", "PC1"))
    assert storage.retry(d.lease, 60, None, Notes("D1", None))
    read = {i: storage.get_job(i) for i in ids}
    assert [(read[i].location.value, read[i].logs, read[i].progress) for i in ids] == [
        ("archive", "A1", "PA1"),
        ("archive", "B3", "PB2"),
        ("dlq", "C1", "PC1"),
        ("hot", "D1", None),
    ]


def test_the_archive_on_the_event_loop_carries_the_notes_too(pg_url: str) -> None:
    """PostgreSQL's workers archive on their event loop (storage/loop_transport.py)."""
    from chokaq.domain.job_logs import Notes
    from chokaq.domain.models import EnqueueRequest
    from chokaq.storage import Storage
    from chokaq.storage.store import Completion

    s = Storage(pg_url)
    s.upgrade()
    try:
        (job_id,) = s.enqueue_many([EnqueueRequest(type="t")])
        (job,) = s.fetch("w", 1, start=True)

        async def archive() -> Any:
            transport = s.loop_transport()
            assert transport is not None
            try:
                return await s.complete_on_loop(transport, "w", [Completion(job.lease, 3, Notes("L", "P"))])
            finally:
                await transport.close()

        assert asyncio.run(archive()) == ({job_id}, [])
        rec = s.get_job(job_id)
        assert rec is not None and (rec.location, rec.logs, rec.progress) == (Location.ARCHIVE, "L", "P")
    finally:
        s.close()
