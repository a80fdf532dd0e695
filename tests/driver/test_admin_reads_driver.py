"""The Deck's figures and the DLQ search on SQL Server, as far as the driver: the capped counts
(TOP, so a large table is never read in full per call), a reused count, and the search's fallback
(SQL Server has no substring index: LIKE, its pattern one typed parameter)."""

from __future__ import annotations

from datetime import datetime

from chokaq.domain.states import Location
from chokaq.storage import Storage
from chokaq.storage.admin import AdminStore
from chokaq.storage.admin_types import JobFilter
from chokaq.storage.figures_cache import FiguresCache
from chokaq.storage.migrations import MIGRATIONS
from tests.driver.recording import Recorder
from tests.driver.test_contract_captures import SQL_VARCHAR, SQL_WVARCHAR, one_transaction

NOW = datetime(2026, 1, 1)


def test_small_tables_are_counted_each_read_after_a_capped_count(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^SELECT SYSUTCDATETIME\(\)", [(NOW,)])
    recorder.answer(r"^SELECT count\(\*\) AS count_1 \nFROM \(SELECT TOP", [(3,)])
    recorder.answer(r"^SELECT count\(\*\) AS count_1 \nFROM \(SELECT TOP", [(2,)])
    recorder.answer(r"FROM chokaq\.\[JobsHot\] GROUP BY", [("Emails", 0, 3)], ["Queue", "Status", "n"])
    recorder.answer(r"FROM chokaq\.\[JobsDLQ\] GROUP BY chokaq\.\[JobsDLQ\]\.\[Queue\]", [("Emails", 2)], ["q", "n"])
    f = FiguresCache(mssql, exact_limit=100, max_age=60).read()
    assert (f.hot_exact, f.dlq_exact) and [(q.queue, q.pending, q.dlq_size) for q in f.queues] == [("Emails", 3, 2)]
    reads = one_transaction(recorder)
    capped = [c for c in reads if c.sql.startswith("SELECT count(*) AS count_1 \nFROM (SELECT TOP")]
    # At most Admin.ExactCountLimit + 1 rows read, the cap a literal (a setting: one plan).
    assert [c.sql.split("FROM", 2)[1:] for c in capped] == [
        [" (SELECT TOP 101 chokaq.[JobsHot].[Id] AS [Id] \n", " chokaq.[JobsHot]) AS anon_1"],
        [" (SELECT TOP 101 chokaq.[JobsDLQ].[Id] AS [Id] \n", " chokaq.[JobsDLQ]) AS anon_1"],
    ]
    assert all(c.params in ([], [()]) for c in capped)


def test_a_large_dlq_is_counted_once_then_reused(mssql: Storage, recorder: Recorder) -> None:
    cache = FiguresCache(mssql, exact_limit=100, max_age=60)
    for _ in range(2):
        recorder.answer(r"^SELECT SYSUTCDATETIME\(\)", [(NOW,)])
        recorder.answer(r"^SELECT count\(\*\) AS count_1 \nFROM \(SELECT TOP", [(0,)])
        recorder.answer(r"^SELECT count\(\*\) AS count_1 \nFROM \(SELECT TOP", [(101,)])
    recorder.answer(r"FROM chokaq\.\[JobsDLQ\] GROUP BY chokaq\.\[JobsDLQ\]\.\[Queue\]", [("Emails", 5000)], ["q", "n"])
    first = cache.read()
    recorder.clear()
    second = cache.read()
    assert not first.dlq_exact and second.queues == first.queues
    assert not any("GROUP BY chokaq.[JobsDLQ]" in c.sql for c in recorder.statements)


def test_the_dlq_search_falls_back_to_like_on_sql_server(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^SELECT count\(\*\)", [(0,)])
    AdminStore(mssql).list_jobs(Location.DLQ, JobFilter(search="Upstream 421"))
    page, count = one_transaction(recorder)
    assert "lower(chokaq.[JobsDLQ].[ErrorDetails]) LIKE ? ESCAPE '/'" in count.sql
    assert count.params[0][:4] == ("%upstream 421%",) * 4
    # Id is an ASCII key (VARCHAR); the error text is NVARCHAR: its pattern must be sent as one, or
    # a needle in another script reaches the server as question marks.
    assert [size[0] for size in count.inputsizes or []][:4] == [SQL_VARCHAR, SQL_WVARCHAR, SQL_WVARCHAR, SQL_WVARCHAR]
    assert page.sql.startswith("SELECT chokaq.[JobsDLQ].[Id]")


def test_a_list_page_counts_at_most_the_cap_plus_one_matches(mssql: Storage, recorder: Recorder) -> None:
    """The page's rows first, then a count over TOP cap + 1 of the matches (served by the filter's
    index, never the whole table); more than the cap: the total is a lower bound."""
    recorder.answer(r"^SELECT count\(\*\) AS count_1 \nFROM \(SELECT TOP 51 ", [(51,)])
    p = AdminStore(mssql, count_cap=50).list_jobs(Location.DLQ, JobFilter(queue="Emails"), page_size=10)
    assert (p.total, p.total_is_lower_bound) == (50, True)
    page, count = one_transaction(recorder)
    assert page.sql.startswith("SELECT chokaq.[JobsDLQ].[Id]") and "OFFSET ? ROWS" in page.sql
    assert count.sql == (
        "SELECT count(*) AS count_1 \nFROM (SELECT TOP 51 chokaq.[JobsDLQ].[Id] AS [Id] \n"
        "FROM chokaq.[JobsDLQ] \nWHERE chokaq.[JobsDLQ].[Queue] = ?) AS anon_1"
    )
    assert count.params == [("Emails",)]
    # Asked for in full (the archive purge's confirmation): a plain count.
    recorder.clear()
    recorder.answer(r"^SELECT count\(\*\)", [(7,)])
    assert AdminStore(mssql, count_cap=50).list_jobs(Location.DLQ, JobFilter(), exact_total=True).total == 7
    assert not any("TOP 51" in c.sql for c in recorder.statements)


def test_the_recent_rates_bound_is_a_value_from_the_database_clock(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^SELECT SYSUTCDATETIME\(\)", [(NOW,)])
    for _ in range(6):
        recorder.answer(r"^SELECT count\(\*\)", [(0,)])
    rates = AdminStore(mssql).recent_rates()
    assert rates["1m"] == {"succeeded": 0, "failed": 0}
    now, *counts = one_transaction(recorder)
    assert now.sql.startswith("SELECT SYSUTCDATETIME()") and len(counts) == 6
    assert counts[0].sql.endswith("WHERE chokaq.[JobsArchive].[FinishedAtUtc] >= ?")
    assert counts[1].sql.endswith("WHERE chokaq.[JobsDLQ].[FailedAtUtc] >= ?")
    assert [c.params for c in counts[:2]] == [[(datetime(2025, 12, 31, 23, 59),)]] * 2
    # A value, typed by pyodbc from the Python datetime (no describe round trip): an index seek.
    assert all(c.describes == 0 for c in counts)


def test_migration_14_creates_the_dlq_reason_index(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"PARSENAME\(CAST\(SERVERPROPERTY", [(16, 3, 160, "chokaq")], ["v", "e", "l", "d"])
    recorder.answer(r"sp_getapplock", [(0,)])
    recorder.answer(r"INFORMATION_SCHEMA", [("SchemaMigrations",)], ["TABLE_NAME"])
    recorder.answer(r"FROM chokaq\.\[SchemaMigrations\]", [(v,) for v, _, _ in MIGRATIONS if v != 14], ["Version"])
    assert mssql.upgrade() == [14]
    stmts = one_transaction(recorder)
    indexes = [c.sql.strip() for c in stmts if "CREATE INDEX" in c.sql]
    assert indexes == ["CREATE INDEX [IX_JobsDLQ_Reason] ON chokaq.[JobsDLQ] ([FailureReason], [FailedAtUtc], [Id])"]
    (record,) = [c for c in stmts if c.sql.startswith("INSERT INTO chokaq.[SchemaMigrations]")]
    assert record.params[0][:2] == (14, "IX_JobsDLQ_Reason (the DLQ filtered by failure reason)")
