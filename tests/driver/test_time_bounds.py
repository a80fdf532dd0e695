"""A filter preview's bound reaches SQL Server to the microsecond, whatever the ODBC driver.

pyodbc sends a ``datetime`` parameter with the precision the driver reports for
SQL_TYPE_TIMESTAMP; FreeTDS may report the old DATETIME's (milliseconds), and the bound of a
preview (its newest job's FailedAtUtc, plus 1 µs) would then lose its microseconds: the newest
previewed jobs would fall outside the action they were previewed for. The bound therefore goes as
ISO 8601 text cast on the server (``CAST(? AS DATETIME2(7))``), never as a datetime parameter.
"""

from __future__ import annotations

from datetime import datetime

from chokaq.storage import Storage
from chokaq.storage.admin import Actor, AdminStore
from chokaq.storage.admin_types import JobFilter
from tests.driver.recording import Recorder
from tests.driver.sqltext import untyped_operands

NEWEST = datetime(2026, 1, 1, 12, 0, 0, 123456)


def test_the_preview_bound_is_text_cast_to_datetime2_with_its_microseconds(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^SELECT count\(\*\)", [(3,)], once=False)
    snapshot = f"{NEWEST.isoformat()}|01NEWEST"
    AdminStore(mssql).purge_dlq(Actor("ops", "admin"), f=JobFilter(queue="emails"), expected_count=3, snapshot=snapshot)
    (chosen,) = [c for c in recorder.statements if c.sql.startswith("SELECT TOP") and "[FailedAtUtc] <" in c.sql]
    assert chosen.sql.count("CAST(? AS DATETIME2(7))") == 2
    values = chosen.params[0]
    assert "2026-01-01T12:00:00.123456" in values and "2026-01-01T12:00:00.123457" in values
    assert not any(isinstance(v, datetime) for v in values), values
    assert chosen.inputsizes is not None
    (i,) = [n for n, v in enumerate(values) if v == "2026-01-01T12:00:00.123456"]
    assert chosen.inputsizes[i] == (12, 26, 0)  # VARCHAR(26): one plan
    assert not untyped_operands(chosen.sql)
