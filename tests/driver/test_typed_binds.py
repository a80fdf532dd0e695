"""No parameter chokaq sends to SQL Server is an untyped operand of arithmetic or of a function.

SQL Server types each parameter from its context when asked to describe a statement
(sp_describe_undeclared_parameters: pyodbc's fast_executemany, and every NULL it binds untyped).
``FLOOR(?)`` or ``(?) - FLOOR(?)`` cannot be typed; the description of the whole statement then
fails and pyodbc binds every parameter as VARCHAR(255). ``CAST(? AS type)`` is always typed.

Two sources cover every statement: the full scenario of test_mssql_compile (run on SQLite, each
statement object compiled again by a dialect initialised as SQL Server 2022), and the statements
only SQL Server gets (claims, fenced moves, move batches, sweep) and the history charts' grouped
reads, sent through the recording driver.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.sql import ClauseElement

from chokaq.domain.models import EnqueueRequest, Lease
from chokaq.domain.states import FailureReason
from chokaq.storage import Storage
from chokaq.storage.admin import Actor, AdminStore
from chokaq.storage.history import load_history
from chokaq.storage.store import Completion
from tests.driver.recording import Recorder, sql_server_2022_engine
from tests.driver.sqltext import untyped_operands
from tests.driver.test_statements import pin_limited_queues
from tests.unit.test_mssql_compile import run_everything


def statements_of_the_full_scenario(tmp_path: Path) -> list[str]:
    dialect = sql_server_2022_engine().dialect
    storage = Storage(f"sqlite:///{tmp_path / 'c.db'}")
    storage.upgrade()
    seen: list[str] = []

    @event.listens_for(storage.engine, "before_execute")
    def capture(conn: Any, clauseelement: Any, multiparams: Any, params: Any, options: Any) -> None:
        if isinstance(clauseelement, ClauseElement):
            rows = multiparams[0] if multiparams and isinstance(multiparams[0], list) else multiparams or [params]
            keys = list(rows[0].keys()) if rows and isinstance(rows[0], dict) and rows[0] else None
            seen.append(str(clauseelement.compile(dialect=dialect, column_keys=keys)))

    try:
        run_everything(storage)
    finally:
        storage.close()
    return seen


def statements_only_sql_server_gets(mssql: Storage, recorder: Recorder) -> list[str]:
    pin_limited_queues(mssql)
    leases = [Lease("01A", "w", 1), Lease("01B", "w", 2)]
    mssql.enqueue(EnqueueRequest(type="t", delay_seconds=2.5, tags="x", idempotency_key="k"))
    mssql.enqueue_many([EnqueueRequest(type="t", delay_seconds=1.5) for _ in range(3)])
    mssql.fetch("w", 5)
    mssql.fetch("w", 5, ["a", "b"], start=True, zombie_retry_types={"t"}, skip=["01X"])
    mssql.queue_cache.pin_limited(["limited"], for_seconds=3600)
    recorder.answer(r"^SELECT chokaq\.\[Queues\]\.\[MaxWorkers\]", [(2, False)], ["MaxWorkers", "IsPaused"])
    recorder.answer(r"^SELECT count\(\*\)", [(0,)])
    mssql.fetch("w", 5, ["limited"])
    mssql.heartbeat("w", leases)
    mssql.release("w", leases)
    mssql.complete("w", [Completion(lease, 3) for lease in leases])
    mssql.fail(leases[0], FailureReason.FATAL_ERROR, "boom")
    mssql.fail(leases[0], FailureReason.TIMEOUT, None)
    mssql.retry(leases[0], 1.25)
    mssql.reschedule("w", leases)
    recorder.answer(r"^SELECT TOP 1000 chokaq\.\[JobsHot\]\.\[Id\]", [("01Z",)], ["Id"])
    mssql.sweep(fetched_timeout=600, zombie_timeout=600, max_attempts=3)
    AdminStore(mssql).purge_archive(datetime(2026, 1, 1), Actor("ops", "admin"))
    # The Deck's history: bucket arithmetic over a bound start and size, all queues and one.
    load_history(mssql, "24h", now=datetime(2026, 1, 1, 12))
    load_history(mssql, "7d", queue="emails", now=datetime(2026, 1, 1, 12))
    return [c.sql for c in recorder.statements]


def test_no_parameter_is_an_untyped_operand(tmp_path: Path, mssql: Storage, recorder: Recorder) -> None:
    everything = statements_of_the_full_scenario(tmp_path)
    mine = statements_only_sql_server_gets(mssql, recorder)
    assert len(everything) > 60 and len(mine) > 20
    for needle in ("WITH pick AS", "CROSS APPLY", "@moved", "AS lease", "DATEADD(SECOND", "DATEDIFF_BIG(SECOND"):
        assert any(needle in sql for sql in mine), needle
    problems = {p for sql in everything + mine for p in untyped_operands(sql)}
    assert not problems, "\n".join(sorted(problems))


def test_the_check_sees_the_old_bulk_enqueue_expression() -> None:
    """The defect this guards against, as the old enqueue_many sent it."""
    old = (
        "INSERT INTO t (a, b) VALUES (?, DATEADD(SECOND, CAST(FLOOR(?) AS INT), "
        "DATEADD(MILLISECOND, CAST(((?) - FLOOR(?)) * 1000 AS INT), SYSUTCDATETIME())))"
    )
    found = untyped_operands(old)
    assert len(found) == 3 and any(f.startswith("arithmetic") for f in found)
    typed = old.replace("FLOOR(?)", "FLOOR(CAST(? AS FLOAT))").replace("((?)", "((CAST(? AS FLOAT))")
    assert untyped_operands(typed) == []
    assert untyped_operands("SELECT x FROM t WHERE a = ? AND b IN (?, ?) AND c LIKE ? OFFSET ? ROWS") == []
    assert untyped_operands("UPDATE t SET n = (n + ?)") and untyped_operands("SELECT coalesce(a, ?)")
