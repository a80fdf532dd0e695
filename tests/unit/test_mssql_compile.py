"""Every statement chokaq runs, compiled for SQL Server.

There is no SQL Server here, so the scenario runs on SQLite while each statement object is
captured and compiled again with the mssql+pyodbc dialect. Assertions check what matters on
SQL Server: lock hints on claims, OUTPUT for moves, SQL Server's clock, no foreign syntax.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.dialects import mssql
from sqlalchemy.sql import ClauseElement

from chokaq.domain.models import EnqueueRequest, Lease
from chokaq.domain.states import FailureReason, Location
from chokaq.storage import Storage
from chokaq.storage.admin import Actor, AdminStore, JobEdit, JobFilter
from chokaq.storage.migrations import render_script
from chokaq.storage.store import Completion

DIALECT = mssql.pyodbc.dialect()


def compile_mssql(stmt: ClauseElement, keys: list[str] | None = None) -> str:
    return str(stmt.compile(dialect=DIALECT, column_keys=keys))


@pytest.fixture
def captured(tmp_path: Path) -> Iterator[tuple[Storage, list[str]]]:
    storage = Storage(f"sqlite:///{tmp_path / 'c.db'}")
    storage.upgrade()
    seen: list[str] = []

    @event.listens_for(storage.engine, "before_execute")
    def capture(conn: Any, clauseelement: Any, multiparams: Any, params: Any, options: Any) -> None:
        if not isinstance(clauseelement, ClauseElement):
            return
        rows = multiparams[0] if multiparams and isinstance(multiparams[0], list) else multiparams or [params]
        keys = list(rows[0].keys()) if rows and isinstance(rows[0], dict) and rows[0] else None
        sql = compile_mssql(clauseelement, keys)
        # Savepoint clauses are rendered by the dialect's own hooks at run time, not from this text.
        if "SAVEPOINT" not in sql and not sql.startswith("SAVE TRANSACTION"):
            seen.append(sql)

    yield storage, seen
    storage.close()


def run_everything(s: Storage) -> None:
    admin = AdminStore(s)
    me = Actor("ops@example.com", "admin")
    s.update_queue("limited", max_workers=2)
    s.update_queue("paused", paused=True)
    s.enqueue(EnqueueRequest(type="a", idempotency_key="k"))
    s.enqueue(EnqueueRequest(type="a", idempotency_key="k"))
    s.enqueue(EnqueueRequest(type="a", delay_seconds=0.5))
    ids = s.enqueue_many([EnqueueRequest(type="a") for _ in range(6)] + [EnqueueRequest(type="b", queue="limited")])
    jobs = s.fetch("w", 10)
    s.fetch("w", 2, start=True, zombie_retry_types={"a"}, skip=[ids[0]])
    started = s.start("w", jobs, {"a"}).started
    leases = [j.lease for j in started]
    s.heartbeat("w", leases)
    s.complete("w", [Completion(leases[0], 3)])
    s.fail(leases[1], FailureReason.FATAL_ERROR, "boom")
    s.retry(leases[2], 1.5)
    s.reschedule("w", [leases[3]])
    s.release("w", [Lease("nope", "w", 0)])
    s.sweep(fetched_timeout=600, zombie_timeout=600, max_attempts=3)
    s.queue_stats()
    s.list_queues()
    s.get_job(ids[0])
    ids = s.enqueue_many([EnqueueRequest(type="c", queue="paused") for _ in range(6)])
    admin.cancel(ids[4:6], me)
    admin.list_jobs(
        Location.DLQ,
        JobFilter(
            search="x",
            failure_reason=FailureReason.CANCELLED,
            queue="default",
            from_utc=datetime(2020, 1, 1),
            to_utc=datetime(2100, 1, 1),
        ),
    )
    admin.list_jobs(Location.HOT, JobFilter(tag="t", type="a"), sort="priority", page=2, page_size=5)
    admin.list_jobs(Location.ARCHIVE, JobFilter())
    admin.edit_dlq(ids[4], JobEdit(payload='{"fixed": true}', tags="t"), me)
    admin.resurrect(ids[4], me, JobEdit(priority=30))
    admin.resurrect_many(me, f=JobFilter(queue="default"), max_jobs=10, dry_run=True)
    admin.resurrect_many(me, ids=[ids[5]])
    admin.purge_dlq(me, f=JobFilter(failure_reason=FailureReason.FATAL_ERROR))
    admin.edit_pending(ids[4], JobEdit(tags="x"), me)
    admin.purge_archive(datetime.now() + timedelta(days=1), me, batch_size=1)
    admin.list_audit(job_id=ids[4], actor="ops@example.com")
    admin.top_errors()
    admin.recent_rates()
    admin.queue_changed("q2", me, {"paused": True}, paused=True)


def test_every_statement_compiles_for_sql_server(captured: tuple[Storage, list[str]]) -> None:
    storage, seen = captured
    run_everything(storage)
    assert len(seen) > 60
    for sql in seen:
        assert "now()" not in sql.lower()
        assert "clock_timestamp" not in sql
        assert "strftime" not in sql
        assert "CURRENT_TIMESTAMP" not in sql, sql
        assert "RETURNING" not in sql, sql
        assert " LIMIT " not in sql, sql
        assert "FOR UPDATE" not in sql, sql
        assert "SKIP LOCKED" not in sql, sql
        assert "ILIKE" not in sql.upper().replace("LIKE LOWER", ""), sql
        # Filtered indexes are only used for literal predicates, never for parameters.
        assert "[Status] = :" not in sql and "[Status] IN (__[POSTCOMPILE" not in sql, sql


def test_claim_carries_the_lock_hints_and_outputs_rows(captured: tuple[Storage, list[str]]) -> None:
    storage, seen = captured
    storage.enqueue(EnqueueRequest(type="a"))
    storage.fetch("w", 5)
    claims = [s for s in seen if re.search(r"UPDATE chokaq\.\[JobsHot\] SET \[Status\]=:\w+, \[WorkerId\]=:\w+", s)]
    assert claims, seen
    claim = claims[0]
    assert "WITH (UPDLOCK, READPAST, ROWLOCK)" in claim
    assert re.match(r"WITH claim AS \n\(SELECT TOP __\[POSTCOMPILE_\w+\] cand\.\[Id\]", claim)
    assert "WHERE chokaq.[JobsHot].[Id] IN (SELECT claim.[Id]" in claim
    assert "OUTPUT inserted.[Id]" in claim
    assert "ORDER BY cand.[Priority] DESC, cand.[ScheduledAtUtc], cand.[CreatedAtUtc]" in claim
    assert "SYSUTCDATETIME()" in claim


def test_a_claim_that_starts_is_the_same_locked_claim(captured: tuple[Storage, list[str]]) -> None:
    storage, seen = captured
    storage.enqueue(EnqueueRequest(type="a"))
    storage.fetch("w", 5, start=True, zombie_retry_types={"a"}, skip=["01HNOTHING"])
    (claim,) = [s for s in seen if "WITH claim AS" in s]
    assert "FROM chokaq.[JobsHot] AS cand WITH (UPDLOCK, READPAST, ROWLOCK)" in claim
    assert "NOT cand.[Id] IN (SELECT CAST([value] AS VARCHAR(50)) FROM OPENJSON(:claim_skip))" in claim
    assert "[AttemptCount]=(chokaq.[JobsHot].[AttemptCount] + :AttemptCount_1)" in claim
    assert "[StartedAtUtc]=SYSUTCDATETIME(), [LastUpdatedUtc]=SYSUTCDATETIME()" in claim.replace(
        "[HeartbeatUtc]=SYSUTCDATETIME(), ", ""
    )
    zombie_flag = "[ZombieRetry]=CASE WHEN chokaq.[JobsHot].[Type] IN (SELECT CAST([value] AS NVARCHAR(255))"
    assert zombie_flag in claim
    assert "OUTPUT inserted.[Id]" in claim and "inserted.[AttemptCount]" in claim


def test_moves_delete_with_output_deleted(captured: tuple[Storage, list[str]]) -> None:
    storage, seen = captured
    run_everything(storage)
    deletes = [s for s in seen if s.startswith("DELETE FROM chokaq.[JobsHot]")]
    assert deletes
    for d in deletes:
        assert "OUTPUT deleted.[Id]" in d
    resurrects = [s for s in seen if s.startswith("DELETE FROM chokaq.[JobsDLQ]") and "deleted.[Payload]" in s]
    assert resurrects, "resurrect must move the DLQ row with OUTPUT"


def test_worker_moves_are_fenced_by_worker_and_attempt(captured: tuple[Storage, list[str]]) -> None:
    storage, seen = captured
    run_everything(storage)
    fenced = [s for s in seen if re.search(r"\[WorkerId\] = :\w+", s) and re.search(r"\[AttemptCount\] = :", s)]
    kinds = {s.split()[0] for s in fenced}
    assert kinds == {"UPDATE", "DELETE", "INSERT"}
    heartbeat = [s for s in fenced if "SET [HeartbeatUtc]=SYSUTCDATETIME()" in s]
    # By primary key: "Status + 0" keeps the planner off the whole Processing filtered index.
    assert heartbeat and all("[Status] + 0 = 2" in h for h in heartbeat)
    for sql in fenced:
        # Ids travel as one JSON parameter, cast back to the key's type so the seek still works.
        assert "[Id] IN (SELECT CAST([value] AS VARCHAR(50)) FROM OPENJSON(:" in sql, sql
        assert not re.search(r"OPENJSON\(:\w+\)\) = 1", sql), sql


def test_worker_moves_copy_under_a_row_lock(captured: tuple[Storage, list[str]]) -> None:
    storage, seen = captured
    run_everything(storage)
    for target in ("JobsArchive", "JobsDLQ"):
        copies = [s for s in seen if s.startswith(f"INSERT INTO chokaq.[{target}]") and " SELECT " in s]
        assert copies, target
        for copy in copies:
            # Without UPDLOCK another session could move the row between the copy and the delete.
            assert "FROM chokaq.[JobsHot] WITH (UPDLOCK, ROWLOCK)" in copy, copy
            assert "[Status] + 0 = 2" in copy, copy
    archive = next(s for s in seen if s.startswith("INSERT INTO chokaq.[JobsArchive]") and " SELECT " in s)
    assert """CAST(JSON_VALUE(:durations, CONCAT('$."', chokaq.[JobsHot].[Id], '"')) AS BIGINT)""" in archive, archive


def test_time_arithmetic_is_sql_servers(captured: tuple[Storage, list[str]]) -> None:
    storage, seen = captured
    run_everything(storage)
    sweep = [s for s in seen if s.startswith("DELETE FROM chokaq.[JobsHot]") and "coalesce" in s.lower()]
    assert sweep
    assert "DATEADD(SECOND" in sweep[0] and "SYSUTCDATETIME()" in sweep[0]
    assert "[ZombieTimeoutSeconds]" in sweep[0]


def test_queue_lock_for_max_workers(captured: tuple[Storage, list[str]]) -> None:
    storage, seen = captured
    storage.update_queue("limited", max_workers=1)
    storage.enqueue(EnqueueRequest(type="a", queue="limited"))
    storage.fetch("w", 5)
    locks = [s for s in seen if s.startswith("SELECT") and "[Queues]" in s and "WITH (UPDLOCK, ROWLOCK)" in s]
    assert locks


def test_ddl_script_for_sql_server() -> None:
    ddl = render_script("mssql")
    assert "IF SCHEMA_ID('chokaq') IS NULL" in ddl
    assert "DATETIME2(7)" in ddl and "NVARCHAR(max)" in ddl
    assert "CREATE UNIQUE INDEX [UX_JobsHot_IdempotencyKey]" in ddl
    assert "WHERE [IdempotencyKey] IS NOT NULL" in ddl
    assert "WHERE [Status] = 0" in ddl and "WHERE [Status] = 2" in ddl
    assert "\nGO\n" in ddl
