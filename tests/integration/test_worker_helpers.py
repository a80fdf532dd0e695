"""A worker's helper tasks are supervised: one that dies stops the worker, and says why, instead
of leaving it claiming and running jobs without (here) heartbeats."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest

from chokaq import JobContext
from chokaq.domain.states import JobStatus
from chokaq.runtime.supervisor import HelperDied
from tests.helpers import wait_for
from tests.integration.test_worker import make_app


class HeartbeatBug(BaseException):
    """Not an Exception: the heartbeat's own error handling (for failed writes) lets it through,
    as it would a bug in the loop itself."""


def test_a_dead_heartbeat_stops_the_worker_and_says_why(db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    app = make_app(db_url)
    running = threading.Event()

    @app.job("hold_v1")
    async def hold(payload: dict[str, Any], ctx: JobContext) -> None:
        running.set()
        while not ctx.is_cancelled():
            await asyncio.sleep(0.01)
        raise asyncio.CancelledError

    def heartbeat_bug(op: str) -> None:
        if op == "heartbeat":
            raise HeartbeatBug("injected: the heartbeat loop itself broke")

    job_id = app.enqueue("hold_v1", {})
    worker = app.worker()
    raised: list[BaseException] = []

    def run() -> None:
        try:
            worker.run(install_signals=False)
        except BaseException as exc:  # the thread's result, checked below
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    with caplog.at_level(logging.ERROR, logger="chokaq.worker"):
        thread.start()
        assert running.wait(10)
        app.storage.fault_injector = heartbeat_bug  # the next heartbeat tick raises
        thread.join(60)
        assert not thread.is_alive(), "the worker kept running without its heartbeat"
    assert len(raised) == 1 and isinstance(raised[0], HelperDied)
    assert "chokaq-heartbeat" in str(raised[0]) and "HeartbeatBug" in str(raised[0])
    assert worker.failure is not None and "chokaq-heartbeat failed" in worker.failure
    assert any("worker helper chokaq-heartbeat failed" in r.getMessage() for r in caplog.records)
    # It stopped gracefully: the job it held went back to Pending, not left to become a zombie.
    app.storage.fault_injector = None
    job = wait_for(lambda: app.storage.get_job(job_id))
    assert job.status is JobStatus.PENDING and job.worker_id is None and job.attempt_count == 0
    app.close()
