"""No statement chokaq sends to SQL Server binds a NULL parameter.

pyodbc asks the server for a NULL parameter's type (``SQLDescribeParam``: msodbcsql runs
``sp_describe_undeclared_parameters``) before the types given to ``setinputsizes`` apply, so a
typed NULL costs a round trip as an untyped one does. chokaq writes NULL into the text instead.
Every driver test is held to this by tests/driver/conftest.py; the operations here are the ones
that bound NULLs before: a batch enqueue without tags or creator, the copies a cancel and a
resurrect make, an audit row without details, a step ended without a result, a worker of every
queue, a queue override cleared.
"""

from __future__ import annotations

from chokaq.domain.models import EnqueueRequest, Lease
from chokaq.domain.states import FailureReason
from chokaq.domain.workers import WorkerIdentity
from chokaq.storage import Storage
from chokaq.storage.admin import Actor, AdminStore
from chokaq.storage.steps import finish_step
from chokaq.storage.workers import WorkerPresence
from tests.driver.recording import Recorder
from tests.driver.rows import DLQ, HOT, T0, columns, row

OPS = Actor("ops", "operator")


def assert_no_nulls(recorder: Recorder) -> None:
    bound = [(c.sql[:120], c.nulls) for c in recorder.statements if c.nulls]
    assert not bound, bound
    assert all(c.describes == 0 for c in recorder.statements)
    recorder.clear()


def test_a_batch_without_tags_or_creator_writes_null(mssql: Storage, recorder: Recorder) -> None:
    reqs = [EnqueueRequest(type="t"), EnqueueRequest(type="t", tags="a,b", created_by="me"), EnqueueRequest(type="t")]
    recorder.answer(r"OUTPUT inserted\.\[Id\]", [("x",), ("y",)], ["Id"], once=False)
    mssql.enqueue_many(reqs)
    inserts = [c for c in recorder.statements if c.sql.startswith("INSERT INTO chokaq.[JobsHot]")]
    # Two shapes: the rows with both (one statement), the rows with neither (NULL in the text).
    assert len(inserts) == 2 and sum(c.param_count for c in inserts) > 0
    assert_no_nulls(recorder)
    mssql.enqueue_all(reqs)
    assert_no_nulls(recorder)


def test_cancel_and_resurrect_copies_write_null(mssql: Storage, recorder: Recorder) -> None:
    held = row(HOT, "01P", Status=2, AttemptCount=1, WorkerId="w", StartedAtUtc=T0, HeartbeatUtc=T0)
    recorder.answer(r"^DELETE FROM chokaq\.\[JobsHot\] OUTPUT deleted\.", [held], columns(HOT))
    recorder.answer(r"^UPDATE chokaq\.\[StatsSummary\]", [], rowcount=1)
    AdminStore(mssql).cancel(["01P"], OPS, running=True, reason="bad deploy")
    assert_no_nulls(recorder)

    dead = row(DLQ, "01A", FailureReason=int(FailureReason.ZOMBIE), AttemptCount=3)
    recorder.answer(r"^SELECT chokaq\.\[JobsDLQ\]", [dead], columns(DLQ))
    recorder.answer(r"^DELETE FROM chokaq\.\[JobsDLQ\]", [dead], columns(DLQ))
    recorder.answer(r"^UPDATE chokaq\.\[StatsSummary\] SET \[FailedTotal\]", rowcount=1)
    recorder.answer(r"^SELECT chokaq\.\[Queues\]\.\[Name\]", [("default",)], ["Name"])
    recorder.answer(r"^SELECT chokaq\.\[JobsHot\]", [row(HOT, "01A", Status=0, WorkerId=None)], columns(HOT))
    AdminStore(mssql).resurrect("01A", OPS)
    assert_no_nulls(recorder)


def test_an_audit_row_without_details_writes_null(mssql: Storage, recorder: Recorder) -> None:
    with mssql.engine.begin() as conn:
        AdminStore.audit(conn, OPS, "queue.pause", [], None)
    (audit,) = [c for c in recorder.statements if "INSERT INTO chokaq.[AuditLog]" in c.sql]
    assert audit.sql.rstrip(")").endswith("NULL")
    assert_no_nulls(recorder)


def test_a_step_without_result_a_worker_of_every_queue_and_a_cleared_override(
    mssql: Storage, recorder: Recorder
) -> None:
    recorder.answer(r"^UPDATE chokaq\.\[JobSteps\]", [(2,)], ["State"])
    finish_step(mssql, Lease("01S", "w", 1), "charge", None, failed=True)
    assert_no_nulls(recorder)
    WorkerPresence(mssql, WorkerIdentity("w-all", "h", 1, "0.1.0", None, 10)).record(0, starting=True)
    assert_no_nulls(recorder)
    names = ["Name", "IsPaused", "IsActive", "ZombieTimeoutSeconds", "MaxWorkers", "LastUpdatedUtc"]
    recorder.answer(r"^SELECT chokaq\.\[Queues\]", [("q", False, True, None, None, T0)], names, once=False)
    mssql.update_queue("q", max_workers=None, zombie_timeout_seconds=None)
    assert_no_nulls(recorder)
