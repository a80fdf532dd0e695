"""A handler's captured logging (runtime/job_log_capture.py) keeps the handler's records, never
chokaq's own: a step written from the handler's thread (a thread handler's ``with ctx.step``) runs
chokaq's storage code in the handler's context, and a warning it logs there (a transient database
error replayed) is the operator's concern in the process's log, not a line of the job's."""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from chokaq import JobContext
from chokaq.domain.states import Location
from chokaq.operations.job_out import JobOut
from chokaq.storage.steps import load_steps
from tests.helpers import wait_for
from tests.integration.test_worker import make_app

APP_LOG = logging.getLogger("tests.steplogs.app")


@pytest.mark.parametrize("kind", ["thread", "async"])
def test_a_storage_warning_during_a_step_write_stays_out_of_the_jobs_logs(
    db_url: str, run_worker: Any, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(db_url)
    failed_once: list[str] = []

    def one_transient_failure(op: str) -> None:
        if op == "step_start" and not failed_once:
            failed_once.append(op)
            raise OperationalError("injected", {}, sqlite3.OperationalError("database is locked"))

    if kind == "thread":

        @app.job("stepper")
        def stepper(payload: dict[str, Any], ctx: JobContext) -> None:
            APP_LOG.warning("the handler's own line")
            with ctx.step("charge") as step:
                step.result = "ch_1"

    else:

        @app.job("stepper")
        async def stepper(payload: dict[str, Any], ctx: JobContext) -> None:
            APP_LOG.warning("the handler's own line")
            async with ctx.step("charge") as step:
                step.result = "ch_1"

    app.storage.fault_injector = one_transient_failure
    job_id = app.enqueue("stepper", {})
    with caplog.at_level(logging.WARNING, logger="chokaq.storage"):
        run_worker(app)
        wait_for(lambda: (r := app.storage.get_job(job_id)) is not None and r.location is Location.ARCHIVE)
    assert failed_once == ["step_start"]
    # The storage did log its replay (the process's log has it)...
    assert any("transient database error in step_start" in r.getMessage() for r in caplog.records)
    assert [(s.name, s.state, s.value()) for s in load_steps(app.storage, job_id)] == [("charge", "done", "ch_1")]
    # ...and the job's logs have the handler's line alone.
    rec = app.storage.get_job(job_id)
    assert rec is not None
    lines = JobOut.from_record(rec).model_dump()["logs"]["lines"]
    assert [(line["logger"], line["message"]) for line in lines] == [("tests.steplogs.app", "the handler's own line")]
