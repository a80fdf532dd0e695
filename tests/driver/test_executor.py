"""The hot path's executor on SQL Server, as far as pyodbc: the same SQL text, parameter values and
``setinputsizes`` types as SQLAlchemy's own execution of the same statement, one round trip per
operation, on a connection put in autocommit once."""

from __future__ import annotations

from typing import Any

from chokaq.domain.models import EnqueueRequest, Lease
from chokaq.domain.states import FailureReason
from chokaq.storage import Storage
from chokaq.storage.statements import (
    complete_statements,
    fail_statements,
    fence_params,
    heartbeat_statement,
    mssql_claim_statement,
    start_statement,
)
from chokaq.storage.statements.enqueue import enqueue_params, statement_for
from chokaq.storage.store import Completion
from tests.driver.recording import Call, Recorder
from tests.driver.rows import HOT_RECORD, columns, row
from tests.driver.test_statements import STARTED, assert_one_statement, pin_limited_queues

LEASES = [Lease("01A", "w", 1), Lease("01B", "w", 2)]


def hot_statements() -> list[tuple[str, Any, dict[str, Any]]]:
    groups, fence = fence_params("w", LEASES, "mssql")
    claim = {"claim_worker": "w", "claim_skip": '["01X"]'}
    return [
        ("claim", mssql_claim_statement(False, False, 10), claim),
        ("claim by queues", mssql_claim_statement(True, False, 4), {**claim, "claim_queues": ["a", "b"]}),
        ("claim and start", mssql_claim_statement(True, False, 3, True, True), {**claim, "claim_queues": ["a"],
                                                                                 "zombie_types": '["t"]'}),
        ("start", start_statement(groups, True), {**fence, "zombie_types": '["t"]'}),
        ("heartbeat", heartbeat_statement(groups), fence),
        ("complete", complete_statements(groups).batch, fence_params("w", LEASES, "mssql", {"01A": 5})[1]),
        ("fail", fail_statements(groups, True).batch, {**fence, "failure_reason": 2, "error_details": "x"}),
    ]  # fmt: skip


def only_statement(recorder: Recorder) -> Call:
    (call,) = recorder.statements
    recorder.clear()
    return call


def test_the_executor_hands_pyodbc_what_sqlalchemy_hands_it(mssql: Storage, recorder: Recorder) -> None:
    assert mssql.tx.autocommit is not None
    for name, stmt, params in hot_statements():
        with mssql.tx.autocommit.connect() as conn:
            conn.execute(stmt, params)
        expected = only_statement(recorder)
        mssql.tx.executor.run(stmt, params, sending=lambda: None)
        got = only_statement(recorder)
        assert got.sql == expected.sql, name
        assert got.params == expected.params, name
        assert got.inputsizes == expected.inputsizes, name
        assert got.inputsizes is not None and got.describes == 0, name


def test_the_pooled_enqueue_hands_pyodbc_what_sqlalchemy_hands_it(mssql: Storage, recorder: Recorder) -> None:
    assert mssql.tx.autocommit is not None
    for req in (
        EnqueueRequest(type="t"),
        EnqueueRequest(type="t", queue="q", tags="x", created_by="me", delay_seconds=2.5, priority=3),
    ):
        stmt, params = statement_for(req, notify=False), enqueue_params("01N", req)
        with mssql.tx.autocommit.connect() as conn:
            conn.execute(stmt, params)
        expected = only_statement(recorder)
        mssql.tx.pooled_once(stmt, params)
        got = only_statement(recorder)
        assert (got.sql, got.params, got.inputsizes) == (expected.sql, expected.params, expected.inputsizes), req
        assert got.inputsizes is not None and got.describes == 0, req


def test_each_hot_operation_is_one_statement_on_an_autocommit_connection(mssql: Storage, recorder: Recorder) -> None:
    pin_limited_queues(mssql)
    mssql.heartbeat("w", LEASES)
    # The executor's connection was opened (and put in autocommit) once, in the fixture: no new
    # connection, no switch, one statement.
    assert not [c for c in recorder.calls if c.kind == "connect"]
    assert_one_statement(recorder, "heartbeat")
    recorder.answer(r"^WITH pick AS", [row(HOT_RECORD, "01A", AttemptCount=1, Status=2)], columns(HOT_RECORD))
    (job,) = mssql.fetch("w", 1, start=True)
    assert job.id == "01A" and job.attempt_count == 1
    assert_one_statement(recorder, "claim")
    recorder.answer(r"^WITH pick AS", [row(HOT_RECORD, "01B")], columns(HOT_RECORD))
    (buffered,) = mssql.fetch("w", 1)
    assert_one_statement(recorder, "claim")
    recorder.answer(r"^UPDATE chokaq\.\[JobsHot\] SET \[Status\]=2", [("01B", 1, None, None, None, False)], STARTED)
    assert [j.id for j in mssql.start("w", [buffered]).started] == ["01B"]
    assert_one_statement(recorder, "start")
    recorder.answer(r"SET \[HeartbeatUtc\]", [("01A",)], ["Id"])
    assert mssql.heartbeat("w", [job.lease]) == {"01A"}
    assert_one_statement(recorder, "heartbeat")
    recorder.answer(r"^SET NOCOUNT ON", [("01A", "default")], ["Id", "Queue"])
    assert mssql.complete("w", [Completion(job.lease, 3)]) == {"01A"}
    assert_one_statement(recorder, "complete")
    assert not [c for c in recorder.calls if c.kind == "connect"]  # no new connection per operation
    # A failure is the one exception: its move and its event feed row are one transaction
    # (test_event_feed_driver.py), on the engine's pool.
    recorder.clear()
    recorder.answer(r"^SET NOCOUNT ON", [("01B", "default")], ["Id", "Queue"])
    assert mssql.fail(Lease("01B", "w", 1), FailureReason.FATAL_ERROR, "boom")
    trips = [c.kind for c in recorder.round_trips()]
    assert trips[:3] == ["execute", "execute", "commit"]
