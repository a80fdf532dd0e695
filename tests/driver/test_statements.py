"""What chokaq hands the ODBC driver on SQL Server: statement shapes, parameter types, round trips.

Production's engine (``Storage(mssql+pyodbc://...)``) runs on a recording pyodbc; see recording.py.
"""

from __future__ import annotations

import json
import re
from datetime import datetime

import pytest

from chokaq.domain.models import EnqueueRequest, Lease
from chokaq.domain.states import FailureReason
from chokaq.settings import StorageSettings
from chokaq.storage import Storage
from chokaq.storage.admin import Actor, AdminStore
from chokaq.storage.store import Completion
from tests.driver.conftest import MSSQL_URL
from tests.driver.recording import Call, Recorder
from tests.driver.rows import DLQ, HOT_RECORD, columns, row

SQL_WVARCHAR = -9
T_CUTOFF = datetime(2026, 1, 1)
STARTED = ["Id", "AttemptCount", "StartedAtUtc", "HeartbeatUtc", "LastUpdatedUtc", "ZombieRetry"]


def pin_limited_queues(s: Storage) -> None:
    """The list of MaxWorkers queues is re-read at most once a second, not per claim; pinned
    (empty) so a claim's count is the claim's alone, however slow the test runs."""
    s.queue_cache.pin_limited([], for_seconds=3600)


def sent(recorder: Recorder) -> list[Call]:
    """Round trips since the last clear (statements, and commits or rollbacks outside autocommit)."""
    return recorder.round_trips()


def assert_one_statement(recorder: Recorder, op: str) -> Call:
    trips = sent(recorder)
    assert len(trips) == 1, f"{op}: {[(c.kind, c.sql[:80]) for c in trips]}"
    (call,) = trips
    assert call.kind == "execute", op
    assert not call.sql.lstrip().upper().startswith("SET TRANSACTION"), op
    assert call.describes == 0, f"{op}: {call.describes} parameters for the server to describe"
    # Nothing switched the connection in or out of autocommit for this operation.
    assert not [c for c in recorder.calls if c.kind == "autocommit"], op
    recorder.clear()
    return call


def test_claim_start_heartbeat_complete_are_one_round_trip_each(mssql: Storage, recorder: Recorder) -> None:
    pin_limited_queues(mssql)
    mssql.heartbeat("w", [Lease("01WARM", "w", 1)])  # the autocommit pool's first connection
    recorder.clear()

    recorder.answer(r"^WITH pick AS", [row(HOT_RECORD, "01A"), row(HOT_RECORD, "01B")], columns(HOT_RECORD))
    jobs = mssql.fetch("w", 2)
    assert [j.id for j in jobs] == ["01A", "01B"]
    claim = assert_one_statement(recorder, "claim")
    assert "UPDATE c SET" in claim.sql

    started = [(j, 1, None, None, None, False) for j in ("01A", "01B")]
    recorder.answer(r"^UPDATE chokaq\.\[JobsHot\] SET \[Status\]=2", started, STARTED)
    result = mssql.start("w", jobs)
    assert [j.id for j in result.started] == ["01A", "01B"] and not result.released
    assert_one_statement(recorder, "start")

    leases = [j.lease for j in result.started]
    recorder.answer(r"SET \[HeartbeatUtc\]", [("01A",), ("01B",)], ["Id"])
    assert mssql.heartbeat("w", leases) == {"01A", "01B"}
    assert_one_statement(recorder, "heartbeat")

    recorder.answer(r"^SET NOCOUNT ON", [("01A", "default"), ("01B", "default")], ["Id", "Queue"])
    assert mssql.complete("w", [Completion(lease, 5) for lease in leases]) == {"01A", "01B"}
    complete = assert_one_statement(recorder, "complete")
    # The copy, the delete and the counter in one batch, in one transaction, counters last.
    body = complete.sql
    assert body.index("INSERT INTO chokaq.[JobsArchive]") < body.index("DELETE h FROM chokaq.[JobsHot]")
    assert body.index("DELETE h FROM chokaq.[JobsHot]") < body.index("chokaq.[StatsSummary]")
    assert "BEGIN TRANSACTION" in body and "COMMIT TRANSACTION" in body


def test_an_enqueue_to_a_known_queue_is_one_round_trip(mssql: Storage, recorder: Recorder) -> None:
    mssql.enqueue(EnqueueRequest(type="t", queue="mail"))  # the queue's row: a transaction of its own
    recorder.clear()
    payload = json.dumps({"text": "任务" * 10})
    mssql.enqueue(EnqueueRequest(type="t", queue="mail", payload=payload, tags="x", delay_seconds=2.5))
    insert = assert_one_statement(recorder, "enqueue")  # no COMMIT: autocommit, as the claim
    assert insert.sql.startswith("INSERT INTO chokaq.[JobsHot]")
    assert "[IdempotencyKey]" in insert.sql and "NULL" in insert.sql  # no key: NULL in the text
    assert insert.inputsizes is not None
    assert insert.inputsizes[insert.params[0].index(payload)] == (SQL_WVARCHAR, 0, 0)  # NVARCHAR(max)
    assert "CAST(? AS FLOAT)" in insert.sql and 2.5 in insert.params[0]


def test_no_null_parameters_on_sql_server(mssql: Storage, recorder: Recorder) -> None:
    """pyodbc describes a NULL parameter with a server round trip: NULLs go in as SQL NULL."""
    pin_limited_queues(mssql)
    lease = Lease("01A", "w", 1)
    mssql.release("w", [lease])
    mssql.retry(lease, 2.5)
    mssql.reschedule("w", [lease])
    mssql.fail(lease, FailureReason.FATAL_ERROR, None)
    mssql.enqueue(EnqueueRequest(type="t"))  # no tags, key or creator
    mssql.fetch("w", 3, start=True)
    mssql.sweep(fetched_timeout=60, zombie_timeout=60, max_attempts=3)
    executes = [c for c in recorder.statements if c.kind == "execute"]
    assert len(executes) >= 8
    for call in executes:
        assert None not in call.params[0], call.sql
        assert call.describes == 0, call.sql
    release = next(c for c in executes if "SET [Status]=0, [WorkerId]=NULL" in c.sql)
    assert "[WorkerId]=NULL" in release.sql


def test_a_large_chinese_payload_is_bound_as_nvarchar_max(mssql: Storage, recorder: Recorder) -> None:
    payload = json.dumps({"text": "任务队列" * 8_500}, ensure_ascii=False)
    assert len(payload.encode("utf-8")) > 100_000
    mssql.enqueue_many([EnqueueRequest(type="t", payload=payload), EnqueueRequest(type="t", delay_seconds=1.5)])
    (insert,) = [c for c in recorder.statements if "INSERT INTO chokaq.[JobsHot]" in c.sql]
    # A typed execute, not fast_executemany: that sends no types, and pyodbc's describe of this
    # statement fails and falls back to VARCHAR(255) (truncation, and '?' for every character).
    assert insert.kind == "execute" and not insert.fast_executemany
    assert insert.describes == 0
    at = insert.params[0].index(payload)
    assert insert.inputsizes is not None
    assert insert.inputsizes[at] == (SQL_WVARCHAR, 0, 0)  # NVARCHAR(max)
    # The delay reaches the server as a typed number.
    assert "CAST(? AS FLOAT)" in insert.sql and "FLOOR(?)" not in insert.sql


def test_the_all_queue_claim_is_an_updatable_cte_over_one_locked_read(mssql: Storage, recorder: Recorder) -> None:
    pin_limited_queues(mssql)
    mssql.fetch("w", 7, start=True, zombie_retry_types={"t"})
    (claim,) = recorder.statements
    sql = claim.sql
    # The queues first (a queue-level test: paused and MaxWorkers queues are not read at all), then
    # each queue's due jobs from the claim index in claim order, TOP (n) over them all.
    assert re.match(r"WITH pick AS \n\(SELECT TOP 7 j\.\[Id\]\nFROM \(SELECT TOP 571 chokaq\.\[Queues\]\.\[Name\]", sql)
    assert "[IsPaused] = 0 AND chokaq.[Queues].[MaxWorkers] IS NULL" in sql
    assert "FROM chokaq.[JobsHot] WITH (INDEX([IX_JobsHot_Fetch]), UPDLOCK, READPAST, ROWLOCK)" in sql
    assert "CROSS APPLY (SELECT TOP 7 chokaq.[JobsHot].[Id]" in sql
    # c re-reads the picked rows by key with the same skip-and-lock hints; the UPDATE goes through it.
    assert "), c AS \n(SELECT chokaq.[JobsHot].[Id], " in sql
    assert (
        "FROM chokaq.[JobsHot] WITH (UPDLOCK, READPAST, ROWLOCK) \nWHERE chokaq.[JobsHot].[Id] IN (SELECT pick.[Id]"
        in sql
    )
    assert sql.count("FROM chokaq.[JobsHot]") == 2
    assert "\nUPDATE c SET [Status]=2, [WorkerId]=?" in sql
    assert "UPDATE chokaq.[JobsHot]" not in sql
    assert "ORDER BY chokaq.[JobsHot].[Priority] DESC, chokaq.[JobsHot].[ScheduledAtUtc], " in sql
    assert "ORDER BY j.[Priority] DESC, j.[ScheduledAtUtc], j.[CreatedAtUtc]" in sql
    assert "[AttemptCount]=c.[AttemptCount] + 1" in sql
    assert "OUTPUT inserted.[Id], inserted.[Queue]" in sql


def test_a_multi_queue_claim_walks_the_fetch_index_once_per_queue(mssql: Storage, recorder: Recorder) -> None:
    pin_limited_queues(mssql)
    mssql.fetch("w", 4, ["emails", "reports", "sms"])
    (claim,) = recorder.statements
    sql = claim.sql
    assert "[Queue] IN (" not in sql
    # The queues travel as one list; each is read as an equality on Queue (IX_JobsHot_Fetch's first
    # key) in the index's order, with the claim hints; then TOP (n) over them, in claim order.
    assert "FROM OPENJSON(CAST(? AS NVARCHAR(max)))) AS ql" in sql
    assert re.search(
        r"CROSS APPLY \(SELECT TOP 4 chokaq\.\[JobsHot\]\.\[Id\], .*?\nFROM chokaq\.\[JobsHot\] "
        r"WITH \(INDEX\(\[IX_JobsHot_Fetch\]\), UPDLOCK, READPAST, ROWLOCK\) "
        r"\nWHERE chokaq\.\[JobsHot\]\.\[Queue\] = q\.\[Name\] "
        r".*?ORDER BY chokaq\.\[JobsHot\]\.\[Priority\] DESC, chokaq\.\[JobsHot\]\.\[ScheduledAtUtc\], "
        r"chokaq\.\[JobsHot\]\.\[CreatedAtUtc\]\) AS j",
        sql,
        re.S,
    ), sql
    assert " UNION ALL " not in sql
    assert "\nUPDATE c SET [Status]=1" in sql
    assert json.loads(claim.params[0][0]) == ["emails", "reports", "sms"]


def test_fenced_moves_join_one_lease_rowset(mssql: Storage, recorder: Recorder) -> None:
    leases = [Lease("01A", "w", 1), Lease("01B", "w", 2), Lease("01C", "w", 3)]
    mssql.heartbeat("w", leases)
    (hb,) = recorder.statements
    assert " OR " not in hb.sql
    assert (
        "FROM chokaq.[JobsHot], (SELECT [Id] COLLATE Latin1_General_100_BIN2 AS [Id], [Attempt] "
        "FROM OPENJSON(CAST(? AS NVARCHAR(max))) "
        "WITH ([Id] VARCHAR(50) '$[0]', [Attempt] INT '$[1]')) AS lease" in hb.sql
    )
    assert "chokaq.[JobsHot].[Id] = lease.[Id] AND chokaq.[JobsHot].[AttemptCount] = lease.[Attempt]" in hb.sql
    assert json.loads(next(p for p in hb.params[0] if str(p).startswith("[["))) == [
        ["01A", 1],
        ["01B", 2],
        ["01C", 3],
    ]


def touched(sql: str) -> str | None:
    """Which kind of table a statement writes first: the counters, the jobs, or neither (savepoints).
    A move batch counts as jobs: its counters come after its rows inside the batch (checked above)."""
    if sql.startswith("SET NOCOUNT ON") or re.match(r"(UPDATE|DELETE FROM|INSERT INTO) chokaq\.\[Jobs", sql):
        return "jobs"
    if re.match(r"(UPDATE|INSERT INTO) chokaq\.\[StatsSummary\]", sql):
        return "StatsSummary"
    return None


def transactions(recorder: Recorder) -> list[list[Call]]:
    """The recorded statements, split at each commit."""
    out: list[list[Call]] = [[]]
    for c in recorder.calls:
        if c.kind == "commit":
            out.append([])
        elif c.kind in ("execute", "executemany"):
            out[-1].append(c)
    return [t for t in out if t]


def test_the_sweep_moves_rows_first_counters_last_in_bounded_batches(recorder: Recorder) -> None:
    s = Storage(MSSQL_URL, settings=StorageSettings(transient_retries=0, cleanup_batch_size=2))
    try:
        with s.engine.connect():
            pass
        recorder.clear()
        # Phase 1: a full batch, then a short one.
        abandoned = r"^UPDATE chokaq\.\[JobsHot\] SET \[Status\]=0, \[WorkerId\]=NULL, \[LastUpdatedUtc\]"
        recorder.answer(abandoned, [("01F1",), ("01F2",)], ["Id"])
        recorder.answer(abandoned, [("01F3",)], ["Id"])
        # Phase 2 (zombies with ZombieRetry): a full batch of two (ids and workers, then the retry
        # by those ids, audited), then none.
        retry_ids = r"^SELECT TOP 2 chokaq\.\[JobsHot\]\.\[Id\], chokaq\.\[JobsHot\]\.\[WorkerId\]"
        recorder.answer(
            retry_ids, [("01R1", "w-dead", None), ("01R2", "w-dead", None)], ["Id", "WorkerId", "HeartbeatUtc"]
        )
        recorder.answer(r"SET \[Status\]=0, \[WorkerId\]=NULL, \[HeartbeatUtc\]=NULL", [("01R1", "a"), ("01R2", "b")],
                        ["Id", "Queue"])  # fmt: skip
        recorder.answer(retry_ids, [], ["Id", "WorkerId", "HeartbeatUtc"])
        # Phase 3 (zombies to the DLQ): two ids, moved; then one.
        recorder.answer(r"^SELECT TOP 2 chokaq\.\[JobsHot\]\.\[Id\]", [("01Z1",), ("01Z2",)], ["Id"])
        recorder.answer(r"^SET NOCOUNT ON", [("01Z1", "a"), ("01Z2", "b")], ["Id", "Queue"])
        recorder.answer(r"^SELECT TOP 2 chokaq\.\[JobsHot\]\.\[Id\]", [("01Z3",)], ["Id"])
        recorder.answer(r"^SET NOCOUNT ON", [("01Z3", "a")], ["Id", "Queue"])
        result = s.sweep(fetched_timeout=60, zombie_timeout=60, max_attempts=3)
        assert (result.recovered, result.retried_zombies, result.archived) == (3, 2, 3)
        assert result.zombie_ids == ["01Z1", "01Z2", "01Z3"]
        # Each transaction that moved jobs wrote its audit row and its event feed row, none other.
        feed = [c for c in recorder.statements if c.sql.startswith("INSERT INTO chokaq.[EventFeed]")]
        audit = [c for c in recorder.statements if c.sql.startswith("INSERT INTO chokaq.[AuditLog]")]
        assert len(feed) == len(audit) == 5  # recover x2, retry x1, bury x2

        txs = transactions(recorder)
        for tx in txs:
            # Counters last: no job-table statement after the first StatsSummary statement.
            touches = [touched(c.sql) for c in tx if touched(c.sql)]
            if "StatsSummary" in touches:
                first = touches.index("StatsSummary")
                assert set(touches[first:]) == {"StatsSummary"}, [c.sql[:70] for c in tx]
            # Bounded: every statement names at most one batch.
            for c in tx:
                if touched(c.sql) == "jobs":
                    # (the retry names the ids a TOP 2 chose, as one JSON list)
                    assert "TOP 2 " in c.sql or "@moved" in c.sql or "OPENJSON" in c.sql, c.sql[:200]
        # Zombies move inside the database: no payload comes out (DELETE ... OUTPUT deleted.[Payload])
        # and none goes back in as a parameter.
        for c in recorder.statements:
            assert "deleted.[Payload]" not in c.sql
            assert not (c.kind == "executemany" and "[JobsDLQ]" in c.sql)
        moves = [c for c in recorder.statements if c.sql.startswith("SET NOCOUNT ON")]
        assert len(moves) == 2
        assert "INSERT INTO chokaq.[JobsDLQ]" in moves[0].sql and "'Zombie detected: heartbeat expired" in moves[0].sql
        # The retried batch: its ids bound as one JSON parameter, and one audit row naming their worker.
        retry = next(c for c in recorder.statements if "[HeartbeatUtc]=NULL" in c.sql)
        assert "OPENJSON" in retry.sql and '["01R1", "01R2"]' in retry.params[0]
        (retry_audit,) = [c for c in audit if "sweep.zombie_retry" in c.params[0]]
        assert "system:sweep" in retry_audit.params[0]
        assert any(isinstance(p, str) and '"worker": "w-dead", "jobs": 2' in p for p in retry_audit.params[0])
    finally:
        s.close()


def test_every_statement_at_the_largest_batch_stays_under_2100_parameters(recorder: Recorder) -> None:
    """SQL Server refuses a statement with more than 2,100 parameters (error 8003)."""
    s = Storage(MSSQL_URL, settings=StorageSettings(transient_retries=0, cleanup_batch_size=100_000))
    try:
        with s.engine.connect():
            pass
        recorder.clear()
        admin = AdminStore(s)
        me = Actor("ops", "admin")
        pin_limited_queues(s)
        ids = [f"01J{i:08d}" for i in range(1000)]  # limits.MAX_BULK_IDS

        # Retention at Storage.CleanupBatchSize's maximum (the old code listed the ids first).
        oldest = [(f"01A{i:08d}",) for i in range(100_000)]
        recorder.answer(r"^SELECT TOP 100000 chokaq\.\[JobsArchive\]\.\[Id\]", oldest)
        admin.purge_archive(T_CUTOFF, me)
        # Bulk enqueue in one batch of 5,000 (a batch may hold up to 100,000).
        s.enqueue_many([EnqueueRequest(type="t", tags="x") for _ in range(5_000)])
        # Bulk operator actions at limits.MAX_BULK_IDS.
        recorder.answer(r"^SELECT chokaq\.\[JobsDLQ\]\.\[Id\]", [(i,) for i in ids], ["Id"], once=False)
        recorder.answer(
            r"^DELETE FROM chokaq\.\[JobsDLQ\] OUTPUT deleted\.\[Id\], deleted\.\[Queue\]",
            [row(DLQ, i) for i in ids],
            columns(DLQ),
        )
        admin.resurrect_many(me, ids=ids)
        admin.purge_dlq(me, ids=ids)
        admin.cancel(ids, me)
        # The worker at its largest: Execution.Prefetch 10,000, Concurrency 1,000, every lease a
        # different attempt (the old fence bound two parameters per distinct attempt).
        leases = [Lease(i, "w", n) for n, i in enumerate(ids)]
        s.fetch("w", 10_000, skip=[f"01S{i:08d}" for i in range(1000)])
        s.fetch("w", 10_000, [f"q{i}" for i in range(50)])
        s.heartbeat("w", leases)
        s.complete("w", [Completion(lease, 1) for lease in leases])
        s.release("w", leases)
        s.reschedule("w", leases)

        assert len(recorder.statements) > 10
        for call in recorder.statements:
            assert call.param_count <= 2100, (call.param_count, call.sql[:200])
    finally:
        s.close()


@pytest.mark.parametrize("op", ["fetch", "heartbeat"])
def test_single_statements_never_reset_the_isolation_level(mssql: Storage, recorder: Recorder, op: str) -> None:
    """The autocommit path must not cost a SET TRANSACTION ISOLATION LEVEL on the way back to the pool."""
    pin_limited_queues(mssql)
    for _ in range(3):
        if op == "fetch":
            mssql.fetch("w", 1)
        else:
            mssql.heartbeat("w", [Lease("01A", "w", 1)])
    assert not [c for c in recorder.statements if "ISOLATION LEVEL" in c.sql]
    assert len(recorder.statements) == 3
    # The fixture's connection was switched to autocommit when it was made; none since.
    assert [c.value for c in recorder.calls if c.kind == "autocommit"] == []
