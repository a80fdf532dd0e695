"""Text parameters are declared with their column's length (dialects/sqlserver_sizes.py).

Without it pyodbc declares ``nvarchar(len(value))`` and SQL Server compiles and caches a plan per
combination of value lengths (pyodbc issue #213). Every driver test is held to "every text
parameter carries a declared length" by tests/driver/conftest.py; here, that the length is the
column's, for the hottest statements and an admin filter.
"""

from __future__ import annotations

from typing import Any

from chokaq.domain import limits
from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import Location
from chokaq.storage import Storage
from chokaq.storage.admin import AdminStore
from chokaq.storage.admin_types import JobFilter
from tests.driver.recording import Call, Recorder

SQL_VARCHAR, SQL_WVARCHAR = 12, -9


def size_at(call: Call, value: Any) -> tuple[Any, ...]:
    (i,) = [i for i, v in enumerate(call.params[0]) if v == value]
    assert call.inputsizes is not None
    return tuple(call.inputsizes[i])


def test_an_enqueue_declares_each_column_length_whatever_the_values(mssql: Storage, recorder: Recorder) -> None:
    req = EnqueueRequest(type="report.build", queue="emails", tags="a,b", created_by="ops", idempotency_key="k-1")
    mssql.enqueue(req)
    (insert,) = [c for c in recorder.statements if c.sql.startswith("INSERT INTO chokaq.[JobsHot]")]
    assert size_at(insert, "emails") == (SQL_WVARCHAR, limits.MAX_QUEUE_LEN, 0)
    assert size_at(insert, "report.build") == (SQL_WVARCHAR, limits.MAX_TYPE_LEN, 0)
    assert size_at(insert, "a,b") == (SQL_WVARCHAR, limits.MAX_TAGS_LEN, 0)
    assert size_at(insert, "ops") == (SQL_WVARCHAR, limits.MAX_ACTOR_LEN, 0)
    assert size_at(insert, "k-1") == (SQL_WVARCHAR, limits.MAX_IDEMPOTENCY_KEY_LEN, 0)
    assert size_at(insert, insert.params[0][0]) == (SQL_VARCHAR, limits.MAX_JOB_ID_LEN, 0)  # the id
    assert size_at(insert, "{}") == (SQL_WVARCHAR, 0, 0)  # the payload: nvarchar(max)
    recorder.clear()
    # Other lengths, the same declaration: one plan.
    longer = EnqueueRequest(type="t", queue="q" * 200, tags="x" * 900, created_by="o", idempotency_key="k" * 90)
    mssql.enqueue(longer)
    (again,) = [c for c in recorder.statements if c.sql.startswith("INSERT INTO chokaq.[JobsHot]")]
    assert again.sql == insert.sql and again.inputsizes == insert.inputsizes


def test_a_multi_queue_claim_declares_its_names_once_whatever_their_lengths(mssql: Storage, recorder: Recorder) -> None:
    # The names travel as one JSON list (statements/claim.py: one statement text whatever their
    # number), declared nvarchar(max): any names, any lengths, one plan.
    mssql.fetch("w", 5, ["a", "a-much-longer-queue-name"])
    (claim,) = [c for c in recorder.statements if "UPDATE" in c.sql or "WITH" in c.sql][:1]
    assert size_at(claim, '["a", "a-much-longer-queue-name"]') == (SQL_WVARCHAR, 0, 0)
    assert size_at(claim, "w")[1] == limits.MAX_WORKER_ID_LEN
    recorder.clear()
    mssql.fetch("w", 5, ["b" * 100, "c", "d"])
    (again,) = [c for c in recorder.statements if "UPDATE" in c.sql or "WITH" in c.sql][:1]
    assert again.sql == claim.sql and again.inputsizes == claim.inputsizes


def test_an_admin_filter_declares_the_column_and_a_longer_pattern_is_max(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^SELECT count\(\*\)", [(0,)], once=False)
    AdminStore(mssql).list_jobs(Location.HOT, JobFilter(queue="emails", type="report"))
    count = recorder.statements[0]
    assert size_at(count, "emails") == (SQL_WVARCHAR, limits.MAX_QUEUE_LEN, 0)
    recorder.clear()
    # A LIKE pattern is two wildcards longer than its needle: past the column, it is sent as max
    # rather than cut short by the driver.
    AdminStore(mssql).list_jobs(Location.DLQ, JobFilter(search="x" * limits.MAX_JOB_ID_LEN))
    count = recorder.statements[0]
    assert count.inputsizes is not None
    patterns = [s for s, v in zip(count.inputsizes, count.params[0], strict=True) if isinstance(v, str)]
    assert patterns[0] == (SQL_VARCHAR, 0, 0)  # %x...x% over the 50 of Id
    assert all(p[1] is not None for p in patterns)
