"""A worker that stops itself once idle (Worker.until_idle / run_until_idle): the drain mode the
Functions host uses, without polling the worker's internals."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from chokaq import ChokaQ
from chokaq.runtime.worker_stats import WorkerStats
from tests.integration.test_worker import make_app


def test_run_until_idle_runs_the_backlog_then_stops(db_url: str) -> None:
    app = make_app(db_url)
    done: list[int] = []

    @app.job("ok_v1")
    async def ok(payload: dict[str, Any]) -> None:
        done.append(payload["n"])

    for n in range(7):
        app.enqueue("ok_v1", {"n": n})
    worker = app.worker(concurrency=3)
    stats = asyncio.run(worker.run_until_idle(0.3, max_seconds=60))
    assert isinstance(stats, WorkerStats)
    assert (stats.started, stats.succeeded, stats.failed, stats.conflicts) == (7, 7, 0, 0)
    assert sorted(done) == list(range(7))
    assert worker.stats == stats.as_dict()  # the dict view stays for older callers
    assert not worker.busy and worker.stopping
    assert app.storage.queue_stats()[0].succeeded_total == 7
    app.close()


def test_a_job_longer_than_the_idle_period_is_not_cut_short(db_url: str) -> None:
    # Idle means holding no job: a handler that outlasts idle_seconds keeps the worker on.
    app = make_app(db_url)
    stopping_when_done: list[bool] = []
    worker_box: list[Any] = []

    @app.job("slow_v1")
    async def slow(payload: dict[str, Any]) -> None:
        await asyncio.sleep(0.6)
        stopping_when_done.append(worker_box[0].stopping)

    app.enqueue("slow_v1", {})
    worker = app.worker()
    worker_box.append(worker)
    stats = asyncio.run(worker.run_until_idle(0.1, max_seconds=60))
    assert stopping_when_done == [False]
    assert stats.succeeded == 1
    app.close()


def test_until_idle_returns_when_the_worker_stops_on_its_own(db_url: str) -> None:
    app: ChokaQ = make_app(db_url)
    worker = app.worker()

    async def scenario() -> None:
        task = asyncio.create_task(worker.run_async())
        asyncio.get_running_loop().call_later(0.2, worker.stop)
        # Not idle long enough for the wait to end by itself: only the stop ends it (the outer
        # bound turns a hang into a failure).
        await asyncio.wait_for(worker.until_idle(3600), 60)
        await task

    asyncio.run(scenario())
    assert worker.stopping
    app.close()


def test_idle_is_counted_from_the_first_claim_not_from_a_slow_start(db_url: str) -> None:
    # A start-up slower than the idle period (a loaded machine, a database waking up): the worker
    # has not looked for work yet, so it is not idle, and the job waiting for it runs.
    app = make_app(db_url)
    done: list[int] = []

    @app.job("ok_v1")
    async def ok(payload: dict[str, Any]) -> None:
        done.append(payload["n"])

    def slow_start(op: str) -> None:
        if op == "ping":
            time.sleep(0.5)

    app.enqueue("ok_v1", {"n": 1})
    app.storage.fault_injector = slow_start
    worker = app.worker()
    stats = asyncio.run(worker.run_until_idle(0.1, max_seconds=60))
    assert done == [1]
    assert stats.succeeded == 1
    app.close()
