"""SQL Server's arm of the storage contract: what each contract operation hands pyodbc, for the
operations tests/driver/test_statements.py and test_executor.py do not already capture.

The table that maps every contract operation to its capture, and the test that holds it to the
contract, are in test_conformance.py. Production's engine runs on a recording pyodbc
(recording.py); rows are scripted where an operation needs an answer to go on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from chokaq.domain.models import EnqueueRequest, Lease
from chokaq.domain.states import FailureReason, JobStatus, Location
from chokaq.settings import StorageSettings
from chokaq.storage import Storage
from chokaq.storage.admin import Actor, AdminStore
from chokaq.storage.migrations import MIGRATIONS
from chokaq.storage.store import Completion
from tests.driver.conftest import MSSQL_URL
from tests.driver.recording import Call, Recorder
from tests.driver.rows import DLQ, HOT, HOT_RECORD, T0, columns, row
from tests.driver.test_statements import STARTED, assert_one_statement, pin_limited_queues

SQL_VARCHAR, SQL_WVARCHAR = 12, -9
SAVEPOINTS = ("IF @@TRANCOUNT = 0 BEGIN TRANSACTION", "SAVE TRANSACTION")
LEASES = [Lease("01A", "w", 1), Lease("01B", "w", 2)]
FENCE = "FROM OPENJSON(CAST(? AS NVARCHAR(max))) WITH ([Id] VARCHAR(50) '$[0]', [Attempt] INT '$[1]')) AS lease"
PER_QUEUE_TIMEOUT = (
    "coalesce((SELECT chokaq.[Queues].[ZombieTimeoutSeconds] \nFROM chokaq.[Queues] \n"
    "WHERE chokaq.[Queues].[Name] = chokaq.[JobsHot].[Queue]), CAST(? AS FLOAT))"
)


def one_transaction(recorder: Recorder, *, savepoints: bool = False, typed: bool = True) -> list[Call]:
    """The statements of the one transaction an operation ran (then the record is cleared): sent
    on a connection left out of autocommit, committed once, every parameter typed (unless
    ``typed`` is False: the caller checks). Savepoint statements are left out unless asked for."""
    _drop_release_tail(recorder)
    kinds = [c.kind for c in recorder.calls if c.kind != "connect"]
    assert kinds.count("commit") == 1, kinds
    end = kinds.index("commit")
    assert set(kinds[:end]) <= {"execute", "executemany"}, kinds
    assert kinds[end + 1 :] in ([], ["rollback"]), kinds  # the pool's reset of a finished connection
    assert [c.value for c in recorder.calls if c.kind == "commit"] == [False]
    stmts = recorder.statements
    for call in stmts:
        assert call.describes == 0 or not typed, call.sql
    recorder.clear()
    return stmts if savepoints else [c for c in stmts if not c.sql.startswith(SAVEPOINTS)]


RELEASE_TAIL = ("SET LOCK_TIMEOUT", "IF APPLOCK_MODE('public', ?, 'Session') <> 'NoLock' EXEC sp_releaseapplock")


def _drop_release_tail(recorder: Recorder) -> None:
    """An upgrade's last transaction, after its commit: the command timeout back and the session's
    migration lock released (sqlserver.py: released only once the upgrade is committed)."""
    calls = [c for c in recorder.calls if c.kind != "connect"]
    commits = [i for i, c in enumerate(calls) if c.kind == "commit"]
    if len(commits) != 2:
        return
    tail = calls[commits[0] + 1 : commits[1]]
    if tail and all(c.kind == "execute" and c.sql.startswith(RELEASE_TAIL) for c in tail):
        assert any(c.sql.startswith(RELEASE_TAIL[1]) for c in tail), [c.sql for c in tail]
        drop = {id(c) for c in [*tail, calls[commits[1]]]}
        recorder.calls[:] = [c for c in recorder.calls if id(c) not in drop]


def first_words(calls: list[Call]) -> list[str]:
    return [" ".join(c.sql.split()[:2]) for c in calls]


def size_of(call: Call, value: Any) -> int:
    """The SQL type setinputsizes gave the parameter holding ``value``."""
    assert call.inputsizes is not None, call.sql
    sql_type: int = call.inputsizes[call.params[0].index(value)][0]
    return sql_type


@contextmanager
def recorded_storage(recorder: Recorder, **settings: Any) -> Iterator[Storage]:
    s = Storage(MSSQL_URL, settings=StorageSettings(transient_retries=0, **settings))
    try:
        with s.engine.connect():
            pass
        recorder.clear()
        yield s
    finally:
        s.close()


def claimed(mssql: Storage, recorder: Recorder, *ids: str) -> list[Any]:
    """Records of jobs ``w`` fetched (a claim answered with ``ids``), the record cleared after."""
    pin_limited_queues(mssql)
    claimed = [row(HOT_RECORD, i, AttemptCount=n) for n, i in enumerate(ids, 1)]
    recorder.answer(r"^WITH pick AS", claimed, columns(HOT_RECORD))
    jobs = mssql.fetch("w", len(ids))
    recorder.clear()
    return jobs


# --------------------------------------------------------------------------- enqueue


def test_an_enqueue_with_a_key_looks_it_up_then_inserts_under_a_savepoint(mssql: Storage, recorder: Recorder) -> None:
    mssql.enqueue(EnqueueRequest(type="t", queue="mail"))  # the queue's row, known from then on
    recorder.clear()
    job_id, created = mssql.enqueue(EnqueueRequest(type="t", queue="mail", idempotency_key="Ключ-1"))
    assert created
    stmts = one_transaction(recorder, savepoints=True)
    assert first_words(stmts) == ["SELECT chokaq.[JobsHot].[Id]", "IF @@TRANCOUNT", "SAVE TRANSACTION", "INSERT INTO"]
    lookup, insert = stmts[0], stmts[-1]
    # The key is compared as NVARCHAR: exactly, under the column's binary collation, never folded.
    assert lookup.sql.endswith("WHERE chokaq.[JobsHot].[IdempotencyKey] = ?")
    assert lookup.params == [("Ключ-1",)] and size_of(lookup, "Ключ-1") == SQL_WVARCHAR
    assert insert.sql.startswith("INSERT INTO chokaq.[JobsHot]") and "[IdempotencyKey]" in insert.sql
    assert size_of(insert, "Ключ-1") == SQL_WVARCHAR and size_of(insert, job_id) == SQL_VARCHAR

    # A live job holds the key: its id comes back and nothing is inserted.
    recorder.answer(r"\[IdempotencyKey\] = \?$", [("01LIVE",)], ["Id"])
    assert mssql.enqueue(EnqueueRequest(type="t", queue="mail", idempotency_key="Ключ-1")) == ("01LIVE", False)
    assert first_words(one_transaction(recorder)) == ["SELECT chokaq.[JobsHot].[Id]"]


def test_an_enqueue_on_the_callers_connection_leaves_the_transaction_to_the_caller(
    mssql: Storage, recorder: Recorder
) -> None:
    mssql.enqueue(EnqueueRequest(type="t", queue="mail"))
    recorder.clear()
    with mssql.engine.connect() as conn:
        with conn.begin():
            mssql.enqueue(EnqueueRequest(type="t", queue="mail"), conn=conn)
            (insert,) = recorder.statements
            assert insert.sql.startswith("INSERT INTO chokaq.[JobsHot]") and insert.describes == 0
            assert not [c for c in recorder.calls if c.kind in ("commit", "rollback", "autocommit")]
        assert [c.kind for c in recorder.calls if c.kind != "connect"] == ["execute", "commit"]
        recorder.clear()
        trans = conn.begin()
        mssql.enqueue(EnqueueRequest(type="t", queue="mail"), conn=conn)
        trans.rollback()
        assert [c.kind for c in recorder.calls if c.kind != "connect"] == ["execute", "rollback"]


def test_enqueue_many_is_one_transaction_per_batch_and_keyed_jobs_go_one_by_one(recorder: Recorder) -> None:
    with recorded_storage(recorder, cleanup_batch_size=2) as s:
        s.enqueue(EnqueueRequest(type="t", queue="bulk"))
        recorder.clear()
        reqs = [EnqueueRequest(type="t", queue="bulk", idempotency_key="k1")] + [
            EnqueueRequest(type="t", queue="bulk", payload=f'{{"n": {i}}}') for i in range(3)
        ]
        ids = s.enqueue_many(reqs)
        assert len(set(ids)) == 4
        commits = [i for i, c in enumerate(recorder.calls) if c.kind == "commit"]
        assert len(commits) == 2  # 4 jobs in batches of 2
        first, second = recorder.calls[: commits[0]], recorder.calls[commits[0] : commits[1]]
        inserts = [[c for c in part if c.sql.startswith("INSERT INTO chokaq.[JobsHot]")] for part in (first, second)]
        # Batch 1: the keyed job's own INSERT (after its lookup), then one INSERT of the other row.
        assert [c.sql.count("OUTPUT inserted.[Id]") for c in inserts[0]] == [0, 1]
        assert any("[IdempotencyKey] = ?" in c.sql for c in first)
        # Batch 2: its two rows in one typed multi-row INSERT, not fast_executemany.
        (bulk,) = inserts[1]
        assert bulk.kind == "execute" and not bulk.fast_executemany and bulk.sql.count("), (") == 1
        assert size_of(bulk, '{"n": 1}') == SQL_WVARCHAR and size_of(bulk, '{"n": 2}') == SQL_WVARCHAR
        assert all(c.describes == 0 for c in recorder.statements)


# --------------------------------------------------------------------------- claims and starts


def test_a_claim_by_queue_that_starts_binds_skip_and_zombie_types_as_json(mssql: Storage, recorder: Recorder) -> None:
    pin_limited_queues(mssql)
    mssql.fetch("w", 5, ["emails"], start=True, skip=["01X"], zombie_retry_types={"t"})
    claim = assert_one_statement(recorder, "claim")
    sql = claim.sql
    assert "chokaq.[JobsHot].[Queue] = q.[Name]" in sql and "\nUPDATE c SET [Status]=2, [WorkerId]=?" in sql
    assert "NOT chokaq.[JobsHot].[Id] IN (SELECT CAST([value] AS VARCHAR(50)) COLLATE Latin1_General_100_BIN2 " in sql
    assert "[ZombieRetry]=CASE WHEN c.[Type] IN (SELECT CAST([value] AS NVARCHAR(255))" in sql
    assert claim.params[0] == ('["emails"]', '["01X"]', "w", '["t"]')
    assert size_of(claim, '["01X"]') == SQL_WVARCHAR and size_of(claim, '["emails"]') == SQL_WVARCHAR


def test_a_claim_of_a_max_workers_queue_locks_its_row_and_claims_only_the_room(
    mssql: Storage, recorder: Recorder
) -> None:
    mssql.queue_cache.pin_limited(["limited"], for_seconds=3600)
    recorder.answer(r"^SELECT chokaq\.\[Queues\]\.\[MaxWorkers\]", [(3, False)], ["MaxWorkers", "IsPaused"])
    recorder.answer(r"^SELECT count\(\*\)", [(1,)])
    recorder.answer(r"^WITH pick AS \n\(SELECT TOP 2 ", [row(HOT_RECORD, "01L", Queue="limited")], columns(HOT_RECORD))
    (job,) = mssql.fetch("w", 5, ["limited", "other"])
    assert job.id == "01L"
    main = recorder.statements[0]
    # The main claim (autocommit, alone) leaves out every queue with MaxWorkers...
    assert main.sql.startswith("WITH ") and "[MaxWorkers] IS NOT NULL" in main.sql
    assert recorder.calls.index(main) < [c.kind for c in recorder.calls].index("commit")
    recorder.calls.remove(main)
    # ...which is claimed in a transaction of its own: its row locked, its active jobs counted,
    # and at most MaxWorkers - active (3 - 1) claimed.
    locked, count, claim = one_transaction(recorder)
    assert "FROM chokaq.[Queues] WITH (UPDLOCK, ROWLOCK)" in locked.sql and locked.params == [("limited",)]
    assert count.sql.endswith("[Queue] = ? AND chokaq.[JobsHot].[Status] IN (1, 2)")
    assert claim.sql.startswith("WITH pick AS \n(SELECT TOP 2 ") and '["limited"]' in claim.params[0]


def test_a_start_with_zombie_retry_types_marks_them_in_its_one_statement(mssql: Storage, recorder: Recorder) -> None:
    jobs = claimed(mssql, recorder, "01A")
    recorder.answer(r"^UPDATE chokaq\.\[JobsHot\] SET \[Status\]=2", [("01A", 2, T0, T0, T0, True)], STARTED)
    (job,) = mssql.start("w", jobs, {"t"}).started
    assert (job.status, job.attempt_count, job.zombie_retry) == (JobStatus.PROCESSING, 2, True)
    start = assert_one_statement(recorder, "start")
    assert "[ZombieRetry]=CASE WHEN" in start.sql and "OPENJSON" in start.sql and '["t"]' in start.params[0]


def test_a_start_that_starts_nothing_looks_for_its_own_then_releases(mssql: Storage, recorder: Recorder) -> None:
    """Its queue was paused after the fetch: nothing starts, the jobs go back to Pending."""
    jobs = claimed(mssql, recorder, "01A", "01B")
    recorder.answer(r"^UPDATE chokaq\.\[JobsHot\] SET \[Status\]=0, \[WorkerId\]=NULL", [("01A",)], ["Id"])
    result = mssql.start("w", jobs)
    assert (result.started, result.released, result.lost) == ([], ["01A"], ["01B"])
    start, look, release = recorder.statements
    assert start.sql.startswith("UPDATE chokaq.[JobsHot] SET [Status]=2")
    # A start whose reply was lost would have left them Processing under this worker.
    assert look.sql.startswith("SELECT chokaq.[JobsHot].[Id]") and "[Status] = 2" in look.sql
    assert look.params == [("01A", "01B", "w")] and size_of(look, "01A") == SQL_VARCHAR
    assert FENCE in release.sql and "OUTPUT inserted.[Id]" in release.sql
    assert all(c.describes == 0 for c in recorder.statements)


def test_a_release_is_one_fenced_statement(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^UPDATE chokaq\.\[JobsHot\] SET \[Status\]=0, \[WorkerId\]=NULL", [("01B",)], ["Id"])
    assert mssql.release("w", LEASES) == ["01B"]
    release = assert_one_statement(recorder, "release")
    assert (
        FENCE in release.sql and "[Status] + 0 = 1" in release.sql and '[["01A", 1], ["01B", 2]]' in release.params[0]
    )


# --------------------------------------------------------------------------- finishing moves


def test_a_completion_it_did_not_move_is_looked_up_in_the_archive(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^SET NOCOUNT ON", [("01A", "default")], ["Id", "Queue"])
    recorder.answer(r"FROM chokaq\.\[JobsArchive\]", [("01B", "w", 2)], ["Id", "WorkerId", "AttemptCount"])
    assert mssql.complete("w", [Completion(lease, 1) for lease in LEASES]) == {"01A", "01B"}
    batch = recorder.statements[0]
    assert batch.sql.startswith("SET NOCOUNT ON")
    recorder.calls.remove(batch)
    (look,) = one_transaction(recorder)
    assert "FROM chokaq.[JobsArchive] \nWHERE chokaq.[JobsArchive].[Id] IN (?)" in look.sql
    assert look.params == [("01B",)] and size_of(look, "01B") == SQL_VARCHAR
    # Archived by someone else's attempt: not ours.
    recorder.answer(r"FROM chokaq\.\[JobsArchive\]", [("01B", "w", 1)], ["Id", "WorkerId", "AttemptCount"])
    assert mssql.complete("w", [Completion(LEASES[1], 1)]) == set()


def test_a_failure_it_did_not_move_is_looked_up_in_the_dlq_by_reason(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"FROM chokaq\.\[JobsDLQ\]", [("01A", "w", 1)], ["Id", "WorkerId", "AttemptCount"])
    assert mssql.fail(LEASES[0], FailureReason.TIMEOUT, None)
    batch, look = recorder.statements
    assert batch.sql.startswith("SET NOCOUNT ON") and "INSERT INTO chokaq.[JobsDLQ]" in batch.sql
    assert "[Id] IN (?) AND chokaq.[JobsDLQ].[FailureReason] = ?" in look.sql
    assert look.params == [("01A", int(FailureReason.TIMEOUT))]


def test_a_retry_moves_the_row_then_counts_it_in_one_transaction(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^UPDATE chokaq\.\[JobsHot\] SET \[Status\]=0", [("mail",)], ["Queue"])
    recorder.answer(r"^UPDATE chokaq\.\[StatsSummary\] SET \[RetriedTotal\]", rowcount=1)
    assert mssql.retry(LEASES[0], 2.5)
    move, count = one_transaction(recorder)
    assert FENCE in move.sql and "OUTPUT inserted.[Queue]" in move.sql
    assert "[ScheduledAtUtc]=DATEADD(SECOND, CAST(FLOOR(CAST(? AS FLOAT)) AS INT)" in move.sql
    assert move.params[0].count(2.5) == 3
    assert count.params == [(1, "mail")]
    # Nothing moved (fenced out): nothing counted.
    assert not mssql.retry(LEASES[0], 2.5)
    (move,) = one_transaction(recorder)
    assert move.sql.startswith("UPDATE chokaq.[JobsHot]")


HISTORY = '[{"attempt":1,"outcome":"retried","ended_utc":"2026-12-03T10:00:00+00:00","message":"Ошибка"}]'


def test_a_retry_writes_the_attempt_history_in_its_own_update(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^UPDATE chokaq\.\[JobsHot\] SET \[Status\]=0", [("mail",)], ["Queue"])
    recorder.answer(r"^UPDATE chokaq\.\[StatsSummary\] SET \[RetriedTotal\]", rowcount=1)
    assert mssql.retry(LEASES[0], 2.5, HISTORY)
    move, count = one_transaction(recorder)  # the same two statements as a retry without history
    assert "[Attempts]=?" in move.sql and FENCE in move.sql
    assert HISTORY in move.params[0] and size_of(move, HISTORY) == SQL_WVARCHAR
    assert count.params == [(1, "mail")]


def test_a_failure_writes_the_attempt_history_in_its_one_batch(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^SET NOCOUNT ON", [("01A", "default")], ["Id", "Queue"])
    assert mssql.fail(LEASES[0], FailureReason.MAX_RETRIES_EXCEEDED, "boom", HISTORY)
    # The move's batch and the event feed's row, in one transaction: the history rides in the move.
    batch, feed, commit = recorder.round_trips()[:3]
    assert feed.sql.startswith("INSERT INTO chokaq.[EventFeed]") and commit.kind == "commit"
    assert batch.sql.startswith("SET NOCOUNT ON")
    assert "[StartedAtUtc], [Attempts], [Logs], [Progress]) OUTPUT" in batch.sql
    assert batch.describes == 0 and size_of(batch, HISTORY) == SQL_WVARCHAR


def test_a_reschedule_gives_the_attempt_back_in_one_statement(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^UPDATE chokaq\.\[JobsHot\] SET \[Status\]=0", [("01A",), ("01B",)], ["Id"])
    assert mssql.reschedule("w", LEASES) == ["01A", "01B"]
    (move,) = one_transaction(recorder)
    assert "[AttemptCount]=(chokaq.[JobsHot].[AttemptCount] - 1)" in move.sql and FENCE in move.sql
    assert "StatsSummary" not in move.sql


# --------------------------------------------------------------------------- recovery and reads


def test_the_sweeps_zombie_statements_take_each_queues_own_timeout(mssql: Storage, recorder: Recorder) -> None:
    result = mssql.sweep(fetched_timeout=30, zombie_timeout=60, max_attempts=3)
    assert (result.recovered, result.retried_zombies, result.archived) == (0, 0, 0)
    recover, retry, bury = recorder.statements
    assert [c.kind for c in recorder.calls].count("commit") == 3  # one transaction per phase
    assert "ZombieTimeoutSeconds" not in recover.sql and set(recover.params[0]) == {-30.0}
    for zombies in (retry, bury):
        assert PER_QUEUE_TIMEOUT in zombies.sql and set(zombies.params[0]) == {60.0}
    assert "[AttemptCount] < 3" in retry.sql and "NOT (chokaq.[JobsHot].[ZombieRetry] = 1" in bury.sql


def test_get_job_reads_the_three_tables_in_one_statement(mssql: Storage, recorder: Recorder) -> None:
    assert mssql.get_job("01A") is None
    (read,) = one_transaction(recorder)
    assert read.sql.count(" UNION ALL ") == 2
    for table in ("JobsHot", "JobsDLQ", "JobsArchive"):
        assert f"\nFROM chokaq.[{table}] \nWHERE chokaq.[{table}].[Id] = ?" in read.sql
    # VARCHAR like the Id column: an NVARCHAR parameter would convert every Id and scan.
    ids = [i for i, p in enumerate(read.params[0]) if p == "01A"]
    assert len(ids) == 3 and {read.inputsizes[i][0] for i in ids} == {SQL_VARCHAR}  # type: ignore[index]
    # Answered from the DLQ: the record says so, with the DLQ's own columns.
    labels = re.findall(r"AS \[(\w+)\]", read.sql.split(" UNION ALL ")[0])
    dlq = dict(zip(columns(DLQ), row(DLQ, "01A", FailureReason=2), strict=True))
    recorder.answer(r"UNION ALL", [tuple({**dlq, "Location_": "dlq"}.get(n) for n in labels)], labels)
    job = mssql.get_job("01A")
    assert job is not None and job.location is Location.DLQ and job.failure_reason == FailureReason(2)


def test_owned_reads_the_workers_fetched_and_processing_jobs(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^SELECT chokaq\.\[JobsHot\]", [row(HOT, "01A", Status=2)], columns(HOT))
    (job,) = mssql.owned("w", since=T0)
    assert job.id == "01A" and job.status is JobStatus.PROCESSING
    (read,) = one_transaction(recorder)
    assert (
        "[Status] IN (1, 2) AND chokaq.[JobsHot].[WorkerId] = ? AND chokaq.[JobsHot].[LastUpdatedUtc] >= ?" in read.sql
    )
    assert read.params == [("w", T0)] and size_of(read, "w") == SQL_WVARCHAR


def test_queues_are_listed_changed_and_counted_in_one_transaction_each(mssql: Storage, recorder: Recorder) -> None:
    queue_row = ("Emails", True, True, 30, 2, T0)
    recorder.answer(r"^SELECT chokaq\.\[Queues\]\.\[Name\], ", [queue_row], columns_of_queues())
    (info,) = mssql.list_queues()
    assert (info.name, info.is_paused, info.max_workers) == ("Emails", True, 2)
    (listing,) = one_transaction(recorder)
    assert listing.sql.endswith("FROM chokaq.[Queues] ORDER BY chokaq.[Queues].[Name]")

    recorder.answer(r"^SELECT chokaq\.\[Queues\]\.\[Name\] \n", [("Emails",)], ["Name"])  # the row exists
    recorder.answer(r"^SELECT chokaq\.\[Queues\]\.\[Name\], ", [queue_row], columns_of_queues())
    info = mssql.update_queue("Emails", paused=True, zombie_timeout_seconds=30, max_workers=2)
    assert info.zombie_timeout_seconds == 30
    ensure, change, back = one_transaction(recorder)
    assert ensure.params == back.params == [("Emails",)] and size_of(ensure, "Emails") == SQL_WVARCHAR
    assert change.sql.startswith("UPDATE chokaq.[Queues] SET [IsPaused]=?, [ZombieTimeoutSeconds]=?, [MaxWorkers]=?")
    assert change.params == [(True, 30, 2, "Emails")]

    recorder.answer(r"^SELECT SYSUTCDATETIME\(\)", [(datetime(2026, 1, 1),)])
    recorder.answer(r"FROM chokaq\.\[JobsHot\] GROUP BY", [("Emails", 0, 4)], ["Queue", "Status", "n"])
    (stats,) = mssql.queue_stats()
    assert (stats.queue, stats.pending) == ("Emails", 4)
    reads = one_transaction(recorder)
    assert len(reads) == 6 and all(c.sql.startswith("SELECT") for c in reads)


def columns_of_queues() -> list[str]:
    return ["Name", "IsPaused", "IsActive", "ZombieTimeoutSeconds", "MaxWorkers", "LastUpdatedUtc"]


# --------------------------------------------------------------------------- schema and operators


def test_an_upgrade_of_a_current_schema_takes_the_lock_and_changes_nothing(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"PARSENAME\(CAST\(SERVERPROPERTY", [(16, 3, 160, "chokaq")], ["v", "e", "l", "d"])
    recorder.answer(r"sp_getapplock", [(0,)])
    recorder.answer(r"INFORMATION_SCHEMA", [("SchemaMigrations",)], ["TABLE_NAME"])
    recorder.answer(r"FROM chokaq\.\[SchemaMigrations\]", [(v,) for v, _, _ in MIGRATIONS], ["Version"])
    assert mssql.upgrade() == []
    calls = [c for c in recorder.calls if c.kind != "connect"]
    stmts = one_transaction(recorder)
    assert not [c.sql for c in stmts if re.search(r"\b(CREATE TABLE|ALTER|INSERT|DROP)\b", c.sql)]
    words = [c.sql for c in stmts]
    lifted = words.index("SET LOCK_TIMEOUT -1")
    lock = next(i for i, sql in enumerate(words) if "sp_getapplock" in sql)
    assert "PARSENAME" in words[0] and lifted < lock and "@LockOwner = 'Session'" in words[lock]
    # After the commit: the session's lock released, the timeout back, committed on their own.
    first_commit = calls.index(next(c for c in calls if c.kind == "commit"))
    after = [c.sql if c.kind == "execute" else c.kind for c in calls[first_commit:]]
    assert after[0] == "commit" and "sp_releaseapplock" in after[1] and after[2] == "SET LOCK_TIMEOUT 30000"
    assert after[3:] in (["commit"], ["commit", "rollback"]), after


def test_migration_6_adds_the_attempt_history_column_to_the_three_job_tables(
    mssql: Storage, recorder: Recorder
) -> None:
    recorder.answer(r"PARSENAME\(CAST\(SERVERPROPERTY", [(16, 3, 160, "chokaq")], ["v", "e", "l", "d"])
    recorder.answer(r"sp_getapplock", [(0,)])
    recorder.answer(r"INFORMATION_SCHEMA", [("SchemaMigrations",)], ["TABLE_NAME"])
    recorder.answer(r"FROM chokaq\.\[SchemaMigrations\]", [(v,) for v, _, _ in MIGRATIONS if v != 6], ["Version"])
    assert mssql.upgrade() == [6]
    stmts = one_transaction(recorder)
    adds = [c.sql for c in stmts if "ALTER TABLE" in c.sql]
    assert adds == [
        f"IF COL_LENGTH('chokaq.{t}', 'Attempts') IS NULL ALTER TABLE chokaq.[{t}] ADD [Attempts] NVARCHAR(max) NULL"
        for t in ("JobsHot", "JobsArchive", "JobsDLQ")
    ]
    (record,) = [c for c in stmts if c.sql.startswith("INSERT INTO chokaq.[SchemaMigrations]")]
    assert record.params[0][0] == 6


def test_a_resurrect_moves_the_row_then_gives_back_the_failure_count(mssql: Storage, recorder: Recorder) -> None:
    dead = row(DLQ, "01A", FailureReason=int(FailureReason.ZOMBIE), AttemptCount=3)
    recorder.answer(r"^SELECT chokaq\.\[JobsDLQ\]", [dead], columns(DLQ))
    recorder.answer(r"^DELETE FROM chokaq\.\[JobsDLQ\]", [dead], columns(DLQ))
    recorder.answer(r"^UPDATE chokaq\.\[StatsSummary\] SET \[FailedTotal\]", rowcount=1)
    recorder.answer(r"^SELECT chokaq\.\[Queues\]\.\[Name\]", [("default",)], ["Name"])
    recorder.answer(r"^SELECT chokaq\.\[JobsHot\]", [row(HOT, "01A", Status=0, WorkerId=None)], columns(HOT))
    job = AdminStore(mssql).resurrect("01A", Actor("ops", "operator"))
    assert job.status is JobStatus.PENDING and job.attempt_count == 0
    stmts = one_transaction(recorder, typed=False)
    assert first_words(stmts) == [
        "SELECT chokaq.[JobsDLQ].[Id],",
        "DELETE FROM",
        "INSERT INTO",
        "UPDATE chokaq.[StatsSummary]",
        "SELECT chokaq.[Queues].[Name]",
        "SELECT chokaq.[JobSteps].[JobId],",
        "INSERT INTO",
        "INSERT INTO",  # the audit row's event feed row
        "SELECT chokaq.[JobsHot].[Id],",
    ]
    locked, _, insert, given_back, _, journal, audit, _, _ = stmts
    # Whether it has a step journal (none here: kept as it is, nothing said of it in the audit).
    assert "OPENJSON" in journal.sql and journal.params[0] == ('["01A"]',)
    assert "FROM chokaq.[JobsDLQ] WITH (UPDLOCK, ROWLOCK)" in locked.sql
    assert insert.sql.startswith("INSERT INTO chokaq.[JobsHot]") and given_back.params == [(-1, "default")]
    # The zombie's lost attempt and the resurrect join the history, typed as Unicode text.
    history = next(p for p in insert.params[0] if isinstance(p, str) and p.startswith("[{"))
    assert [(e["outcome"], e.get("by")) for e in json.loads(history)] == [("worker lost", None), ("resurrected", "ops")]
    assert size_of(insert, history) == SQL_WVARCHAR
    assert audit.sql.startswith("INSERT INTO chokaq.[AuditLog]") and "dlq.resurrect" in audit.params[0]
    assert [c.describes for c in stmts if c is not insert] == [0] * 8
    # The move into JobsHot writes the cleared HeartbeatUtc, StartedAtUtc and WorkerId as NULL in
    # the text: a NULL parameter, typed or not, would cost pyodbc a describe round trip.
    assert insert.nulls == [] and insert.describes == 0
    inserted = insert.sql.split(" OUTPUT ")[0]
    for cleared in ("HeartbeatUtc", "StartedAtUtc", "WorkerId"):
        assert f"[{cleared}]" in inserted, cleared
    assert ", NULL" in insert.sql
