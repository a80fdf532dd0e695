"""SQL Server under load, as far as the driver shows it: one index and one lock order for every claim,
predicates that are index keys, batch statements under the lock-escalation threshold, migration 13's
index DDL, and a completion's durations as a column of its lease rowset (docs/sqlserver.md).

What these check is the text, parameters and DDL sent; the plans and locks they lead to are SQL
Server's documented behaviour, confirmed only by a live server (the live suite).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import Index

from chokaq.domain.breakers import BreakerPolicy
from chokaq.domain.models import Lease
from chokaq.settings import StorageSettings
from chokaq.storage import Storage
from chokaq.storage.admin import Actor, AdminStore
from chokaq.storage.breakers import BreakerStore
from chokaq.storage.migrations import MIGRATIONS
from chokaq.storage.schema import jobs_hot
from chokaq.storage.store import Completion
from chokaq.storage.workers import WorkerDirectory
from tests.driver.conftest import MSSQL_URL
from tests.driver.recording import Call, Recorder
from tests.driver.test_statements import pin_limited_queues

CLAIM_INDEX = "IX_JobsHot_Fetch"
INDEX_READ = f"WITH (INDEX([{CLAIM_INDEX}]), UPDLOCK, READPAST, ROWLOCK)"
KEY_READ = "WITH (UPDLOCK, READPAST, ROWLOCK)"
# SQL Server escalates a statement's row and key locks on one index or table to a table lock at 5,000.
ESCALATION = 5000
OPEN = 1  # chokaq.domain.breakers: an open breaker


def claims_of_every_shape(s: Storage, recorder: Recorder) -> list[Call]:
    """The claim statements of: all queues, --queues, one queue, a claim that starts, breakers on,
    a MaxWorkers queue's locked claim, and a half-open breaker's probes."""
    pin_limited_queues(s)
    s.fetch("w", 5)
    s.fetch("w", 5, ["emails", "reports", "sms"], skip=["01X"])
    s.fetch("w", 5, ["emails"])
    s.fetch("w", 5, start=True, zombie_retry_types={"t"})
    s._claimer.breaker = True
    s.fetch("w", 5)
    s._claimer.breaker = False
    s.queue_cache.pin_limited(["limited"], for_seconds=3600)
    recorder.answer(r"^SELECT chokaq\.\[Queues\]\.\[MaxWorkers\]", [(3, False)], ["MaxWorkers", "IsPaused"])
    recorder.answer(r"^SELECT count\(\*\)", [(1,)])
    s.fetch("w", 5, ["limited"])
    t0 = datetime(2026, 1, 1)
    breaker = ("mailer", OPEN, 2, None, t0, t0, 0, None, t0, t0)
    names = ["JobType", "State", "FailureCount", "WindowStartUtc", "OpenedAtUtc", "OpenUntilUtc"]
    names += ["ProbesInFlight", "UpdatedBy", "LastUpdatedUtc", "Now"]
    recorder.answer(r"FROM chokaq\.\[CircuitBreakers\]", [breaker], names)
    recorder.answer(r"CROSS APPLY", [("01P",)], ["Id"])
    BreakerStore(s).claim_probes("w", "mailer", BreakerPolicy(), None)
    # Every statement reading JobsHot but the MaxWorkers queue's count of its running jobs.
    return [c for c in recorder.statements if "chokaq.[JobsHot]" in c.sql and not c.sql.startswith("SELECT count")]


def jobs_hot_reads(sql: str) -> list[str]:
    """The hints of each reference to JobsHot in ``sql``, in text order ('' for none)."""
    hint = r"(?:FROM|UPDATE) chokaq\.\[JobsHot\] ?(WITH \((?:INDEX\(\[\w+\]\), )?[A-Z, ]+\))?"
    return [m.group(1) or "" for m in re.finditer(hint, sql)]


def test_every_claim_reads_the_claim_index_first_and_its_rows_by_key_after(mssql: Storage, recorder: Recorder) -> None:
    """One index and one lock order: each claim's locked read is the claim index (keys first), and
    its only other JobsHot reference re-reads the picked rows by key, skipping held rows too. Two
    claimers then never hold one row through two different indexes (the 1205 cycle)."""
    claims = claims_of_every_shape(mssql, recorder)
    reads = [c for c in claims if "CROSS APPLY" in c.sql]
    # All queues, --queues, one queue, claim-and-start, breakers on, a MaxWorkers queue's main and
    # locked claims, the probes' ids.
    assert len(reads) == 8, [c.sql[:60] for c in claims]
    for call in reads:
        sql = call.sql
        assert sql.count(INDEX_READ) == 1, sql
        assert "IX_JobsHot_FetchAny" not in sql
        hints = jobs_hot_reads(sql)
        assert hints[0] == INDEX_READ, (hints, sql)
        if sql.startswith("WITH pick AS"):
            # The picked rows, by primary key, under the same skip-and-lock hints: never waited on.
            assert hints == [INDEX_READ, KEY_READ], (hints, sql)
            assert f"FROM chokaq.[JobsHot] {KEY_READ} \nWHERE chokaq.[JobsHot].[Id] IN (SELECT pick.[Id]" in sql
            assert sql.index(INDEX_READ) < sql.index(KEY_READ) < sql.index("\nUPDATE c SET")
        else:
            assert sql.startswith("SELECT TOP 1 j.[Id]") and hints == [INDEX_READ], sql  # the probes' ids
    # The probes' claim goes by primary key ("Status + 0" keeps the filtered indexes out of it).
    (probe,) = [c for c in claims if c.sql.startswith("UPDATE chokaq.[JobsHot] SET [Status]=1")]
    assert "[Status] + 0 = 0" in probe.sql and "OPENJSON" in probe.sql


def claim_index() -> Index:
    (index,) = [i for i in jobs_hot.indexes if i.name == CLAIM_INDEX]
    return index


def test_a_claim_tests_queues_once_each_and_reads_only_claim_index_columns(mssql: Storage, recorder: Recorder) -> None:
    """Paused and MaxWorkers queues are left out before any job is read (no Queue NOT IN per row);
    Queue and ScheduledAtUtc are keys of the index the claim reads, and nothing the locked read
    tests needs the clustered row, so no row it cannot take is looked up and locked there."""
    index = claim_index()
    keys = [c.name for c in index.columns]
    assert keys[:1] == ["Queue"] and "ScheduledAtUtc" in keys
    readable = {*keys, *(index.dialect_options["mssql"]["include"] or ()), "Id", "Status"}
    claims = claims_of_every_shape(mssql, recorder)
    assert len(claims) >= 8  # eight claims (and the probes' UPDATE)
    for call in claims:
        sql = call.sql
        assert "[JobsHot].[Queue] NOT IN" not in sql and "[JobsHot].[Queue] IN" not in sql, sql
        if "CROSS APPLY" not in sql:
            continue
        branch = sql[sql.index("CROSS APPLY (") : sql.index(") AS j")]
        assert "chokaq.[JobsHot].[Queue] = q.[Name]" in branch
        assert "chokaq.[JobsHot].[ScheduledAtUtc] <= SYSUTCDATETIME()" in branch
        used = set(re.findall(r"chokaq\.\[JobsHot\]\.\[(\w+)\]", branch))
        assert used <= readable, used - readable


@pytest.fixture(params=[1000, 4000, 5000, 100_000])
def capped(request: pytest.FixtureRequest, recorder: Recorder) -> Iterator[Storage]:
    s = Storage(MSSQL_URL, settings=StorageSettings(transient_retries=0, cleanup_batch_size=request.param))
    with s.engine.connect():
        pass
    recorder.clear()
    try:
        yield s
    finally:
        s.close()


def rows_named(call: Call) -> int:
    """The most rows one statement of ``call`` may touch: its TOP (n) (a claim's, times its queues),
    or the ids a parameter lists."""
    sql = call.sql
    tops = [int(n) for n in re.findall(r"\bTOP \(?(\d+)\)?", sql)]
    most = max(tops, default=0)
    if "CROSS APPLY" in sql:
        # TOP (queues) ... CROSS APPLY (SELECT TOP (n) per queue): queues x n keys locked at most.
        queues, per_queue = tops[1], tops[2]
        most = max(most, queues * per_queue)
    for p in call.params[0] if call.params else ():
        if isinstance(p, str) and p.startswith("["):
            most = max(most, len(json.loads(p)))
    return most


def test_every_batch_statement_stays_under_the_escalation_threshold(capped: Storage, recorder: Recorder) -> None:
    """Storage.CleanupBatchSize (up to 100,000), Execution.Prefetch (10,000): each statement names
    at most 4,000 rows, so its row locks stay under SQL Server's 5,000 of lock escalation."""
    s = capped
    pin_limited_queues(s)
    size = s.settings.cleanup_batch_size
    # A full batch where ids are read first (the zombies' move then names them all), then nothing.
    full = min(size, 4000)
    recorder.answer(r"^SELECT TOP \d+ chokaq\.\[JobsHot\]\.\[Id\]", [(f"01Z{i:08d}",) for i in range(full)])
    s.sweep(fetched_timeout=60, zombie_timeout=60, max_attempts=3)
    admin = AdminStore(s)
    admin.purge_archive(datetime(2026, 1, 1), Actor("ops", "admin"))
    admin.purge_dlq_older(datetime(2026, 1, 1), Actor("ops", "admin"))
    WorkerDirectory(s).sweep(silent_for=60, retention=60)
    BreakerStore(s).expire_waiting(60, size)
    s.fetch("w", 10_000)
    s.fetch("w", 10_000, [f"q{i}" for i in range(50)], start=True)
    batches = [c for c in recorder.statements if re.search(r"\bTOP\b|OPENJSON", c.sql)]
    assert len(batches) >= 9
    for call in batches:
        assert rows_named(call) <= 4000 < ESCALATION, (rows_named(call), call.sql[:300])


def catalogue(rows: list[tuple[str, bool, str | None]]) -> tuple[list[tuple[Any, ...]], list[str]]:
    return [tuple(r) for r in rows], ["index", "sequential", "included"]


OLD_INDEXES = {
    # What databases made before migration 13 hold (index, OPTIMIZE_FOR_SEQUENTIAL_KEY, included column).
    "JobsHot": [
        ("PK__JobsHot__1", True, None),
        ("IX_JobsHot_Fetch", False, None),
        ("IX_JobsHot_FetchAny", False, None),
        ("IX_JobsHot_FetchedRecovery", False, None),
        ("IX_JobsHot_ProcessingHeartbeat", False, None),
        ("IX_JobsHot_QueueStatus", False, None),
        ("UX_JobsHot_IdempotencyKey", False, None),
    ],
    "JobsArchive": [
        ("PK__JobsArch__1", True, None),
        ("IX_JobsArchive_FinishedAt", False, None),
        ("IX_JobsArchive_QueueFinished", False, None),
    ],
    "JobsDLQ": [
        ("PK__JobsDLQ__1", True, None),
        ("IX_JobsDLQ_FailedAt", False, None),
        ("IX_JobsDLQ_QueueReason", False, None),
        ("IX_JobsDLQ_Type", False, None),
        ("IX_JobsDLQ_ZombieWorker", False, None),
    ],
    "AuditLog": [
        ("PK__AuditLog__1", True, None),
        ("IX_AuditLog_AtUtc", False, None),
        ("IX_AuditLog_Actor", False, None),
    ],
}
HISTORY = ["StartedAtUtc", "ScheduledAtUtc", "CreatedAtUtc", "DurationMs"]
CURRENT_INDEXES = {
    "JobsHot": [
        ("PK__JobsHot__1", True, None),
        ("IX_JobsHot_Fetch", False, "Type"),
        ("IX_JobsHot_FetchAny", False, None),
        ("IX_JobsHot_FetchedRecovery", True, None),
        ("IX_JobsHot_ProcessingHeartbeat", True, None),
        ("IX_JobsHot_QueueStatus", False, None),
        ("UX_JobsHot_IdempotencyKey", False, None),
    ],
    "JobsArchive": [
        ("PK__JobsArch__1", True, None),
        *[("IX_JobsArchive_FinishedAt", True, c) for c in HISTORY],
        *[("IX_JobsArchive_QueueFinished", False, c) for c in HISTORY],
    ],
    "JobsDLQ": [
        ("PK__JobsDLQ__1", True, None),
        ("IX_JobsDLQ_FailedAt", True, "FailureReason"),
        ("IX_JobsDLQ_QueueReason", False, None),
        ("IX_JobsDLQ_Type", False, None),
        ("IX_JobsDLQ_ZombieWorker", False, None),
    ],
    "AuditLog": [
        ("PK__AuditLog__1", True, None),
        ("IX_AuditLog_AtUtc", True, None),
        ("IX_AuditLog_Actor", False, None),
    ],
}
MIGRATION_13_DDL = [
    "CREATE INDEX [IX_JobsHot_Fetch] ON chokaq.[JobsHot] ([Queue], [Priority] DESC, [ScheduledAtUtc], [CreatedAtUtc]) "
    "INCLUDE ([Type]) WHERE [Status] = 0 WITH (DROP_EXISTING = ON)",
    "ALTER INDEX [IX_JobsHot_FetchedRecovery] ON chokaq.[JobsHot] SET (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)",
    "ALTER INDEX [IX_JobsHot_ProcessingHeartbeat] ON chokaq.[JobsHot] SET (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)",
    "CREATE INDEX [IX_JobsArchive_FinishedAt] ON chokaq.[JobsArchive] ([FinishedAtUtc]) INCLUDE ([StartedAtUtc], "
    "[ScheduledAtUtc], [CreatedAtUtc], [DurationMs]) WITH (DROP_EXISTING = ON, OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)",
    "CREATE INDEX [IX_JobsArchive_QueueFinished] ON chokaq.[JobsArchive] ([Queue], [FinishedAtUtc]) INCLUDE "
    "([StartedAtUtc], [ScheduledAtUtc], [CreatedAtUtc], [DurationMs]) WITH (DROP_EXISTING = ON)",
    "CREATE INDEX [IX_JobsDLQ_FailedAt] ON chokaq.[JobsDLQ] ([FailedAtUtc], [Id]) INCLUDE ([FailureReason]) "
    "WITH (DROP_EXISTING = ON, OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)",
    "ALTER INDEX [IX_AuditLog_AtUtc] ON chokaq.[AuditLog] SET (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)",
]


def upgrade_to_13(s: Storage, recorder: Recorder, indexes: dict[str, list[tuple[str, bool, str | None]]]) -> list[str]:
    """Migration 13 alone (every other version recorded), the catalogue answered from ``indexes``;
    returns the DDL sent."""
    recorder.answer(r"PARSENAME\(CAST\(SERVERPROPERTY", [(16, 3, 160, "chokaq")], ["v", "e", "l", "d"])
    recorder.answer(r"sp_getapplock", [(0,)])
    recorder.answer(r"INFORMATION_SCHEMA", [("SchemaMigrations",)], ["TABLE_NAME"])
    recorder.answer(r"FROM chokaq\.\[SchemaMigrations\]", [(v,) for v, _, _ in MIGRATIONS if v != 13], ["Version"])
    for table in ("JobsHot", "JobsArchive", "JobsDLQ", "AuditLog"):
        recorder.answer(r"FROM sys\.indexes", *catalogue(indexes[table]))
    assert s.upgrade() == [13]
    sent = [c.sql for c in recorder.statements]
    looks = [sql for sql in sent if "FROM sys.indexes" in sql]
    assert len(looks) == 4 and all("OBJECT_ID(?)" in sql for sql in looks)
    (record,) = [c for c in recorder.statements if c.sql.startswith("INSERT INTO chokaq.[SchemaMigrations]")]
    assert record.params[0][0] == 13
    return [sql for sql in sent if re.match(r"(CREATE|ALTER|DROP) ", sql)]


def test_migration_13_includes_the_claim_and_history_columns_and_sets_sequential_keys(
    mssql: Storage, recorder: Recorder
) -> None:
    assert upgrade_to_13(mssql, recorder, OLD_INDEXES) == MIGRATION_13_DDL


def test_migration_13_on_a_current_database_sends_no_ddl(mssql: Storage, recorder: Recorder) -> None:
    assert upgrade_to_13(mssql, recorder, CURRENT_INDEXES) == []


def test_the_script_carries_migration_13s_definitions() -> None:
    from chokaq.storage.migrations import render_script

    script = render_script("mssql")
    for ddl in MIGRATION_13_DDL:
        if ddl.startswith("CREATE INDEX"):
            assert ddl.replace("DROP_EXISTING = ON, ", "").replace(" WITH (DROP_EXISTING = ON)", "") in script
        else:
            name = ddl.split(" ")[2]
            assert re.search(rf"CREATE INDEX {re.escape(name)} .* WITH \(OPTIMIZE_FOR_SEQUENTIAL_KEY = ON\)", script)


def test_a_completion_carries_each_duration_in_its_lease_rowset(mssql: Storage, recorder: Recorder) -> None:
    leases = [Lease("01A", "w", 1), Lease("01B", "w", 2), Lease("01C", "w", 1)]
    recorder.answer(r"^SET NOCOUNT ON", [(lease.job_id, "default") for lease in leases], ["Id", "Queue"])
    mssql.complete("w", [Completion(lease, 10 * (n + 1)) for n, lease in enumerate(leases)])
    (batch,) = recorder.statements
    # OPENJSON parses the document once for the statement; no per-row JSON_VALUE of a whole document.
    assert "JSON_VALUE" not in batch.sql
    assert "WITH ([Id] VARCHAR(50) '$[0]', [Attempt] INT '$[1]', [DurationMs] BIGINT '$[2]')) AS lease" in batch.sql
    assert ", lease.[DurationMs], " in batch.sql
    (rowset,) = [p for p in batch.params[0] if isinstance(p, str) and p.startswith("[[")]
    assert sorted(json.loads(rowset)) == [["01A", 1, 10], ["01B", 2, 20], ["01C", 1, 30]]
    assert batch.param_count == 2 and batch.describes == 0  # the rowset and the worker


def test_a_multi_queue_claim_binds_its_skip_list_once(mssql: Storage, recorder: Recorder) -> None:
    pin_limited_queues(mssql)
    skip = [f"01S{i:04d}" for i in range(200)]
    mssql.fetch("w", 5, ["emails", "reports", "sms", "push"], skip=skip)
    (claim,) = recorder.statements
    lists = [p for p in claim.params[0] if isinstance(p, str) and p.startswith("[")]
    assert [json.loads(p) for p in lists].count(skip) == 1
    assert claim.sql.count("OPENJSON") == 2  # the queues and the skip list, each once


def test_a_claim_of_many_named_queues_reads_every_one_within_the_cap(mssql: Storage, recorder: Recorder) -> None:
    """Prefetch 10,000 over 50 queues: each queue is read (its n keys locked), n x 50 within 4,000."""
    pin_limited_queues(mssql)
    mssql.fetch("w", 10_000, [f"q{i}" for i in range(50)])
    (claim,) = recorder.statements
    pick, queues, per_queue = (int(n) for n in re.findall(r"\bTOP (\d+)", claim.sql)[:3])
    assert pick == per_queue == 80 and queues >= 50 and queues * per_queue <= 4000
