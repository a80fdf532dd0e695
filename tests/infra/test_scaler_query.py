"""The KEDA scaler's query, run through its SQLite/PostgreSQL twin against real job states.

KEDA runs the T-SQL text in infra/bicep/modules/worker.bicep on Azure SQL. There is no SQL Server
here, so the same text is translated token by token (brackets to double quotes, SYSUTCDATETIME()
to the database's UTC clock as chokaq's own statements spell it) and run on the real tables.
"""

from __future__ import annotations

import re

from sqlalchemy import text
from sqlalchemy.dialects import postgresql, sqlite

from chokaq.domain.models import EnqueueRequest
from chokaq.storage import Storage
from chokaq.storage.sqlfuncs import utcnow
from chokaq.storage.store import Completion

from .conftest import module_by_path
from .test_bicep import SCALER_QUERY, _through_module, _worker


def bicep_query() -> str:
    call, parsed, app = _worker()
    (rule,) = app["properties"]["template"]["scale"]["rules"]
    query = _through_module(call, parsed, rule["custom"]["metadata"]["query"])
    assert isinstance(query, str)
    return query


def twin(query: str, dialect_name: str) -> str:
    dialect = postgresql.dialect() if dialect_name == "postgresql" else sqlite.dialect()
    table = 'chokaq."JobsHot"' if dialect_name == "postgresql" else '"JobsHot"'
    out = query.replace("[chokaq].[JobsHot]", table)
    out = out.replace("SYSUTCDATETIME()", str(utcnow().compile(dialect=dialect)))
    out = re.sub(r"\[(\w+)\]", r'"\1"', out)
    assert "[" not in out and "SYSUTCDATETIME" not in out, out
    return out


def metric(storage: Storage, query: str) -> int:
    sql = twin(query, storage.dialect)
    return int(storage.read(lambda c: c.execute(text(sql)).scalar_one(), op="scaler"))


def test_the_bicep_carries_the_tested_query() -> None:
    module_by_path("modules/worker.bicep")
    assert bicep_query() == SCALER_QUERY


def test_running_work_keeps_the_metric_above_zero(storage: Storage) -> None:
    query = bicep_query()
    assert metric(storage, query) == 0
    storage.enqueue_many([EnqueueRequest(type="t") for _ in range(3)])
    storage.enqueue(EnqueueRequest(type="t", delay_seconds=3600))  # not due: not counted
    assert metric(storage, query) == 3
    # A worker claims the backlog and starts it: nothing due is left, only Processing jobs.
    running = storage.fetch("w1", 10, start=True)
    assert len(running) == 3
    assert metric(storage, query) == 3, "only Processing jobs remain; the replicas must stay"
    # Claimed but not started (Fetched) counts too.
    storage.enqueue(EnqueueRequest(type="t"))
    (fetched,) = storage.fetch("w2", 10)
    assert metric(storage, query) == 4
    # Finished work leaves the count: then KEDA may scale to zero.
    storage.complete("w1", [Completion(j.lease, 1) for j in running])
    storage.release("w2", [fetched.lease])
    assert metric(storage, query) == 1
    (again,) = storage.fetch("w2", 10, start=True)
    storage.complete("w2", [Completion(again.lease, 1)])
    assert metric(storage, query) == 0
