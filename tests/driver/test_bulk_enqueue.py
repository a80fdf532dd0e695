"""Bulk enqueue on SQL Server, at the driver: one transaction, every INSERT under SQL Server's
2,100 parameters and 1,000 VALUES rows, typed parameters, the keys looked up in one statement."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from chokaq.domain.models import EnqueueRequest
from chokaq.settings import StorageSettings
from chokaq.storage import Storage
from tests.driver.conftest import MSSQL_URL
from tests.driver.recording import Call, Recorder

SQL_WVARCHAR = -9


def rows_of(call: Call) -> int:
    """VALUES rows in one INSERT statement."""
    return call.sql.count("), (") + 1


def test_a_bulk_enqueue_is_one_transaction_of_bounded_typed_inserts(recorder: Recorder) -> None:
    s = Storage(MSSQL_URL, settings=StorageSettings(transient_retries=0))
    try:
        with s.engine.connect():
            pass
        s.queue_cache.confirm(["bulk"])  # its row exists: what is left is the batch itself
        recorder.clear()
        recorder.answer(r"^SELECT chokaq\.\[JobsHot\]\.\[IdempotencyKey\]", [("k-0", "01EXISTING")])
        later = (datetime.now(UTC) + timedelta(hours=1)).replace(tzinfo=None)
        reqs = [EnqueueRequest(type="t", queue="bulk", tags="x", payload=f'{{"n": {n}}}') for n in range(4_000)]
        reqs += [EnqueueRequest(type="t", queue="bulk", idempotency_key=f"k-{n}") for n in range(600)]
        reqs += [EnqueueRequest(type="t", queue="bulk", scheduled_at=later) for _ in range(300)]
        out = s.enqueue_all(reqs)

        assert len(out) == 4_900 and [e.created for e in out].count(False) == 1
        assert out[4_000].id == "01EXISTING" and not out[4_000].created
        commits = [i for i, c in enumerate(recorder.calls) if c.kind == "commit"]
        assert len(commits) == 1  # one transaction, every statement inside it
        assert all(recorder.calls.index(c) < commits[0] for c in recorder.statements)
        lookups = [c for c in recorder.statements if c.sql.startswith("SELECT chokaq.[JobsHot].[IdempotencyKey]")]
        assert len(lookups) == 1 and lookups[0].param_count == 1  # the 600 keys as one JSON list
        assert "OPENJSON" in lookups[0].sql
        inserts = [c for c in recorder.statements if c.sql.startswith("INSERT INTO chokaq.[JobsHot]")]
        assert sum(rows_of(c) for c in inserts) == 4_899
        for call in inserts:
            assert call.param_count <= 2100 and rows_of(call) <= 1000, (call.param_count, rows_of(call))
            assert call.kind == "execute" and not call.fast_executemany
            assert call.describes == 0, call.sql[:200]
        # As many statements as the bounds need, no more: 13 columns a row (14 with a key), each
        # statement sent as chokaq split it (not split again by SQLAlchemy).
        assert [rows_of(c) for c in inserts] == [161] * 24 + [136] + [149] * 4 + [3] + [161, 139]
        # Typed: the payload as NVARCHAR; the due time of an ``at`` job is never NULL, so pyodbc
        # binds it by its value (a datetime, as SQLAlchemy's setinputsizes says) without a describe.
        first = inserts[0]
        assert first.inputsizes is not None
        assert first.inputsizes[first.params[0].index('{"n": 0}')][0] == SQL_WVARCHAR
        at_insert = next(c for c in inserts if later in c.params[0])
        assert at_insert.inputsizes is not None
        assert at_insert.inputsizes[at_insert.params[0].index(later)][0] is datetime
        assert "DATEADD" not in at_insert.sql
    finally:
        s.close()


def test_an_enqueue_at_a_time_binds_it_and_is_one_round_trip(mssql: Storage, recorder: Recorder) -> None:
    mssql.queue_cache.confirm(["default"])
    later = datetime(2026, 12, 24, 7, 0)
    mssql.enqueue(EnqueueRequest(type="t", scheduled_at=later))
    (call,) = recorder.round_trips()
    assert call.sql.startswith("INSERT INTO chokaq.[JobsHot]") and "DATEADD" not in call.sql
    assert later in call.params[0] and call.describes == 0


def test_a_bulk_enqueue_on_the_callers_connection_leaves_the_transaction_to_it(
    mssql: Storage, recorder: Recorder
) -> None:
    mssql.queue_cache.confirm(["default"])
    with mssql.engine.connect() as conn:
        recorder.clear()
        trans = conn.begin()
        out = mssql.enqueue_all([EnqueueRequest(type="t"), EnqueueRequest(type="t")], conn=conn)
        assert [e.created for e in out] == [True, True]
        # Its own savepoint (a key race rolls back only that), no commit of its own.
        assert [c.kind for c in recorder.calls if c.kind in ("commit", "rollback")] == []
        sql = [c.sql for c in recorder.statements]
        save = next(i for i, text in enumerate(sql) if text.startswith("SAVE TRANSACTION"))
        assert sql[save + 1].startswith("INSERT INTO chokaq.[JobsHot]")
        trans.rollback()
    assert [c.kind for c in recorder.calls if c.kind in ("commit", "rollback")][:1] == ["rollback"]
