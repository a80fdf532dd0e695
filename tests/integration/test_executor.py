"""The hot path's executor (storage/executor.py) on SQLite and PostgreSQL: it sends what SQLAlchemy
sends, maps rows as SQLAlchemy maps them, raises errors as SQLAlchemy raises them, and keeps one
connection per thread with the pool's set-up."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import String, bindparam, event, func, insert, select, text
from sqlalchemy.exc import DBAPIError, IntegrityError

from chokaq.domain.models import EnqueueRequest, Lease
from chokaq.domain.states import FailureReason, JobStatus
from chokaq.settings import StorageSettings
from chokaq.storage import Storage
from chokaq.storage.engine import is_transient
from chokaq.storage.executor_sql import array_literal
from chokaq.storage.records import HOT_ROW
from chokaq.storage.schema import NOTES_COLUMNS, hot_record_columns, jobs_hot, queues
from chokaq.storage.sqlfuncs import ListParam, utcnow
from chokaq.storage.statements import (
    claim_statement,
    complete_statements,
    fail_statements,
    fence_params,
    heartbeat_statement,
    start_statement,
)
from chokaq.storage.statements.enqueue import enqueue_params, statement_for
from chokaq.storage.store import Completion

LEASES = [Lease("01A", "w", 1), Lease("01B", "w", 1), Lease("01C", "w", 2)]


def hot_statements(dialect: str) -> list[tuple[str, Any, dict[str, Any]]]:
    """Every statement shape the hot path sends, with parameters (SQLite and PostgreSQL forms)."""
    groups, fence = fence_params("w", LEASES, dialect)
    claim = {"claim_worker": "w", "claim_skip": ["01X", "01Y"]}
    out: list[tuple[str, Any, dict[str, Any]]] = [
        ("claim", claim_statement(False, False, 10), claim),
        ("claim by queue", claim_statement(True, False, 7), {**claim, "claim_queues": ["a", "b"]}),
        ("claim and start", claim_statement(False, False, 5, True, True), {**claim, "zombie_types": ["t"]}),
        ("start", start_statement(groups, True), {**fence, "zombie_types": ["t", "u"]}),
        ("heartbeat", heartbeat_statement(groups), fence),
    ]
    # An enqueue to a known queue (PostgreSQL and SQL Server send it through the executor).
    for req in (
        EnqueueRequest(type="t"),
        EnqueueRequest(type="t", queue="q", tags="x", created_by="me", delay_seconds=2.5, priority=3),
    ):
        stmt = statement_for(req, notify=dialect == "postgresql")
        out.append(("enqueue", stmt, enqueue_params("01N", req)))
    complete = complete_statements(groups)
    failed = {**fence, "failure_reason": 2, "error_details": "boom"}
    if dialect == "postgresql":
        out.append(("complete", complete.single, {**fence, "durations": '{"01A": 5}'}))
        out.append(("fail", fail_statements(groups, True).single, failed))
    else:
        out.append(("complete copy", complete.copy, {**fence, "durations": '{"01A": 5}'}))
        out.append(("complete remove", complete.remove, fence))
        out.append(("fail copy", fail_statements(groups, True).copy, failed))
    return out


def sent_by_sqlalchemy(storage: Storage, stmt: Any, params: dict[str, Any]) -> tuple[str, Any, bool]:
    """What SQLAlchemy hands the driver for ``stmt`` (run in a transaction that is rolled back),
    and whether rows came back."""
    seen: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, _ctx: Any, _many: bool) -> None:
        seen.append((statement, parameters))

    event.listen(storage.engine, "before_cursor_execute", capture)
    try:
        with storage.engine.connect() as conn, conn.begin() as tx:
            returns_rows = conn.execute(stmt, params).returns_rows
            tx.rollback()
    finally:
        event.remove(storage.engine, "before_cursor_execute", capture)
    ((statement, parameters),) = [s for s in seen if not s[0].startswith("BEGIN")]
    return statement, parameters, returns_rows


def test_the_executor_sends_the_text_and_parameters_sqlalchemy_sends(storage: Storage) -> None:
    storage.ping()  # the dialect is initialised (SQLite's default schema name) before rendering
    for name, stmt, params in hot_statements(storage.dialect):
        sql, parameters, returns_rows = sent_by_sqlalchemy(storage, stmt, params)
        rendered = storage.tx.executor.rendered(stmt, params)
        assert rendered.sql == sql, name
        # PostgreSQL's rows are fetched without reading the cursor's description first.
        assert rendered.returns_rows is (returns_rows and storage.dialect == "postgresql"), name
        bound = rendered.bind(params)
        if storage.dialect == "postgresql":
            # Lists go as one array literal (the same array once the server casts it).
            expected = {k: array_literal(v) if isinstance(v, list) else v for k, v in parameters.items()}
            assert bound == expected, name
            assert all(isinstance(v, str) for v in bound.values() if isinstance(v, (str, list))), name
        else:
            assert tuple(bound) == tuple(parameters), name


def test_claimed_and_started_records_are_what_a_read_through_sqlalchemy_finds(storage: Storage) -> None:
    storage.enqueue(EnqueueRequest(type="t", tags="x", idempotency_key="k1", priority=3, created_by="me"))
    storage.enqueue(EnqueueRequest(type="u", payload='{"a": 1}'))
    claimed = storage.fetch("w", 5, start=True, zombie_retry_types={"t"})
    fetched_later = storage.enqueue(EnqueueRequest(type="t"))[0]
    buffered = storage.fetch("w", 5)
    assert [j.id for j in buffered] == [fetched_later]
    started = storage.start("w", buffered, {"t"}).started
    for job in [*claimed, *started]:
        stored = storage.get_job(job.id)
        assert stored is not None
        assert job.status == stored.status == JobStatus.PROCESSING
        for field in ("queue", "type", "payload", "tags", "idempotency_key", "priority", "attempt_count",
                      "worker_id", "created_by", "zombie_retry", "scheduled_at_utc", "created_at_utc",
                      "started_at_utc", "heartbeat_utc", "last_updated_utc"):  # fmt: skip
            assert getattr(job, field) == getattr(stored, field), field
        assert type(job.started_at_utc) is type(stored.started_at_utc)
    assert {j.zombie_retry for j in claimed} == {True, False}
    leases = [j.lease for j in [*claimed, *started]]
    assert storage.heartbeat("w", leases) == {lease.job_id for lease in leases}


def test_the_claim_returns_whole_rows_in_the_order_records_unpack() -> None:
    # Whole but for the job's logs and progress, which no claim reads.
    assert tuple(c.name for c in hot_record_columns) == HOT_ROW
    assert tuple(c.name for c in jobs_hot.c if c.name not in NOTES_COLUMNS) == HOT_ROW


def test_moves_through_the_executor_count_their_jobs(storage: Storage) -> None:
    for _ in range(3):
        storage.enqueue(EnqueueRequest(type="t", queue="q1"))
    storage.enqueue(EnqueueRequest(type="t", queue="q2"))
    jobs = storage.fetch("w", 10, start=True)
    done = [Completion(j.lease, 7) for j in jobs if j.queue == "q1"]
    (other,) = [j for j in jobs if j.queue == "q2"]
    assert storage.complete("w", done) == {d.lease.job_id for d in done}
    assert storage.fail(other.lease, FailureReason.FATAL_ERROR, "boom")
    totals = {s.queue: (s.succeeded_total, s.failed_total) for s in storage.queue_stats()}
    assert totals == {"q1": (3, 0), "q2": (0, 1)}
    archived = storage.get_job(done[0].lease.job_id)
    assert archived is not None and archived.duration_ms == 7
    failed = storage.get_job(other.id)
    assert failed is not None and failed.error_details == "boom"


HOSTILE_IDS = ["a,b", "{x}", " sp ", "NULL", "", "ü漢", "q'uote", 'dq"', "back\\slash", "}", "a b,c"]


def test_an_id_list_bound_as_an_array_literal_is_the_same_array_on_the_server(pg_url: str) -> None:
    s = Storage(pg_url)
    try:
        stmt = select(bindparam("ids", type_=ListParam(String(50))))
        for ids in [[], ["01A"], HOSTILE_IDS, [i for i in HOSTILE_IDS if '"' not in i and "\\" not in i]]:
            ((back,),) = s.tx.run_statement(stmt, {"ids": ids}, op="test")
            assert back == ids
        assert array_literal(["a", 'b"']) == ["a", 'b"']  # the driver's dumper takes these
        assert array_literal(["a\\"]) == ["a\\"]
        assert array_literal(["a", "b"]) == '{"a","b"}'
        assert array_literal(["a", 1]) == ["a", 1]  # not all strings: the dumper's business
        assert array_literal(("a",)) == ("a",)
    finally:
        s.close()


def test_driver_errors_are_raised_and_classified_as_sqlalchemy_raises_them(pg_url: str) -> None:
    s = Storage(pg_url, settings=StorageSettings(statement_timeout=0.05, transient_retries=0))
    s.upgrade()
    try:
        new_queue = insert(queues).values(Name=bindparam("n"), LastUpdatedUtc=utcnow())
        s.tx.run_statement(new_queue, {"n": "q"}, op="test")
        with pytest.raises(IntegrityError) as dup:
            s.tx.run_statement(new_queue, {"n": "q"}, op="test")
        assert not is_transient(dup.value) and not dup.value.connection_invalidated
        # The executor's connection has the pool's start-up options: the statement timeout ends this.
        with pytest.raises(DBAPIError) as slow:
            s.tx.run_statement(select(func.pg_sleep(2)), {}, op="test")
        assert is_transient(slow.value)
        assert s.heartbeat("w", [Lease("01A", "w", 1)]) == set()  # the connection is still usable
    finally:
        s.close()


def backend_pid(s: Storage) -> int:
    ((pid,),) = s.tx.run_statement(select(func.pg_backend_pid()), {}, op="test")
    return int(pid)


def test_a_connection_that_broke_is_dropped_and_the_call_replayed(pg_url: str) -> None:
    s = Storage(pg_url, settings=StorageSettings(transient_retries=2))
    s.upgrade()
    try:
        first = backend_pid(s)
        with s.engine.connect() as c:
            c.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first})
        with s.ambiguity() as seen:
            assert s.heartbeat("w", [Lease("01A", "w", 1)]) == set()
        assert seen.ambiguous  # the write was sent on a connection that died: it may have run
        assert backend_pid(s) != first
    finally:
        s.close()


@pytest.fixture
def pg_storage(pg_url: str) -> Iterator[Storage]:
    s = Storage(pg_url)
    s.upgrade()
    try:
        yield s
    finally:
        s.close()


def test_each_thread_keeps_one_connection_of_its_own_outside_the_pool(pg_storage: Storage) -> None:
    pids: list[int] = []

    def twice() -> None:
        pids.extend([backend_pid(pg_storage), backend_pid(pg_storage)])

    threads = [threading.Thread(target=twice) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(pids) == 6 and len(set(pids)) == 3
    assert all(pids[i] == pids[i + 1] for i in range(0, 6, 2))
    assert pg_storage.engine.pool.checkedout() == 0  # detached: the pool's connections are all free
    links = list(pg_storage.tx.executor._links)
    pg_storage.tx.executor.close()
    assert all(link.raw.closed for link in links)


def test_a_parameter_passed_once_must_be_passed_every_time(storage: Storage) -> None:
    storage.ping()
    groups, fence = fence_params("w", [Lease("01A", "w", 1)], storage.dialect)
    rendered = storage.tx.executor.rendered(heartbeat_statement(groups), fence)
    # The statement's own values (none here) are the only defaults: never the first call's worker.
    with pytest.raises(KeyError):
        rendered.bind({k: v for k, v in fence.items() if k != "fence_worker"})


def test_the_executor_never_takes_a_connection_that_went_stale_in_the_shared_pool(
    pg_storage: Storage, caplog: pytest.LogCaptureFixture
) -> None:
    first, other = pg_storage.engine.connect(), pg_storage.engine.connect()
    pid = first.execute(select(func.pg_backend_pid())).scalar_one()
    first.close()  # back in the shared pool, dead from the next line on
    other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    other.commit()
    other.close()
    found: list[set[str]] = []
    thread = threading.Thread(target=lambda: found.append(pg_storage.heartbeat("w", [Lease("01A", "w", 1)])))
    thread.start()
    thread.join()
    assert found == [set()]
    # A fresh connection of the executor's own: no failed attempt, nothing to replay.
    assert "transient database error" not in caplog.text


def test_a_broken_connection_retires_every_older_one_as_the_pool_would(pg_storage: Storage) -> None:
    """A connection that breaks usually means the server restarted or failed over: the other threads'
    connections are replaced before their next statement, not each found broken by a write."""
    pids: dict[str, list[int]] = {"a": [], "b": []}
    go = {name: threading.Event() for name in ("a", "b")}
    done = {name: threading.Event() for name in ("a", "b")}

    def thread(name: str) -> None:
        for _ in range(2):
            go[name].wait()
            go[name].clear()
            pids[name].append(backend_pid(pg_storage))
            done[name].set()

    threads = [threading.Thread(target=thread, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for name in ("a", "b"):
        go[name].set()
        done[name].wait()
        done[name].clear()
    with pg_storage.engine.connect() as c:
        c.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pids["a"][0]})
        c.commit()
    for name in ("a", "b"):  # a finds its connection broken and replays; b's is retired unused
        go[name].set()
        done[name].wait()
    for t in threads:
        t.join()
    assert pids["a"][1] != pids["a"][0] and pids["b"][1] != pids["b"][0]
