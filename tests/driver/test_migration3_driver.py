"""Migration 3 on SQL Server (keys to the binary collation), against recorded catalogue answers.

What it refuses before changing anything (live workers, foreign indexes and statistics, bound
objects, case-variant names, a log too small), each table converted in its own transaction so a
crash resumes at the next one, nothing at all sent to a database in the current form, and a
version-2 database (before the later migrations' columns, tables and indexes) upgraded to the
current index definitions.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from chokaq.domain.errors import ConfigurationError
from chokaq.storage import Storage
from chokaq.storage.dialects.sqlserver_keys import _wanted
from chokaq.storage.migrations import MIGRATIONS
from chokaq.storage.schema import KEY_COLLATION, SEQUENTIAL_KEY, metadata
from tests.driver.recording import Recorder
from tests.driver.version2 import LATER_INDEXES, Version2, fresh, parse

OLD_COLLATION = "SQL_Latin1_General_CP1_CI_AS"
DDL = re.compile(r"^\s*(ALTER|CREATE|DROP)\b|\bALTER (TABLE|INDEX)\b|\bDROP (INDEX|STATISTICS)\b")
MB = 1024 * 1024


def catalogue(recorder: Recorder, engine: Any, converted: frozenset[str] = frozenset()) -> None:
    """sys.columns and the primary keys, table by table in the order the plan asks: the tables in
    ``converted`` in the current form (sequential key on), the others as migration 1 made them."""
    dialect = engine.dialect
    for table in metadata.sorted_tables:
        done = table.name in converted
        rows = []
        for column in table.columns:
            wanted = _wanted(column, dialect)
            if wanted is None:
                rows.append((column.name, "int", None))
            elif done:
                rows.append((column.name, wanted[0], wanted[1] or OLD_COLLATION))
            else:
                rows.append((column.name, "varchar", OLD_COLLATION))
        recorder.answer(r"FROM sys\.columns AS c", rows, ["name", "type", "collation"])
        changed = not done and any(_wanted(c, dialect) for c in table.columns)
        if changed or table.info.get(SEQUENTIAL_KEY):
            recorder.answer(r"FROM sys\.key_constraints", [(f"PK_{table.name}", done)], ["name", "seq"])
    for table in metadata.sorted_tables:  # the step's own read of the table's indexes, in plan order
        if table.name not in converted and (
            any(_wanted(c, dialect) for c in table.columns) or table.info.get(SEQUENTIAL_KEY)
        ):
            names = [(str(i.name),) for i in table.indexes]
            recorder.answer(r"^SELECT i\.name FROM sys\.indexes AS i WHERE", names, ["name"])


def upgrade_from_2(recorder: Recorder) -> None:
    """A database at every version but 3, on SQL Server 2022."""
    recorder.answer(r"PARSENAME\(CAST\(SERVERPROPERTY", [(16, 3, 160, "chokaq")], ["v", "e", "l", "d"])
    recorder.answer(r"sp_getapplock", [(0,)])
    recorder.answer(r"INFORMATION_SCHEMA", [("SchemaMigrations",)], ["TABLE_NAME"])
    recorder.answer(r"FROM chokaq\.\[SchemaMigrations\]", [(v,) for v, _, _ in MIGRATIONS if v != 3], ["Version"])


def clear_checks(recorder: Recorder, engine: Any, **found: Any) -> None:
    """The pre-checks' answers: nothing found unless given. Indexes, statistics and bound objects
    are asked table by table, in the plan's order; what is given is JobsHot's."""
    recorder.answer(r"OBJECT_ID\(N'chokaq\.Workers'\)", found.get("live", []), ["WorkerId"], once=False)
    planned = [t.name for t in metadata.sorted_tables if any(_wanted(c, engine.dialect) for c in t.columns)]
    for table in planned:
        mine = table == "JobsHot"
        recorder.answer(r"JOIN sys\.index_columns", found.get("indexes", []) if mine else [], ["i", "c", "f"])
        recorder.answer(r"user_created = 1", found.get("statistics", []) if mine else [], ["s", "c"])
        bound = found.get("bound", []) if mine else []
        recorder.answer(r"sys\.sql_expression_dependencies", bound, ["s", "n", "k", "c"])
    recorder.answer(r"GROUP BY v COLLATE", found.get("variants", []), ["lo", "hi"])
    recorder.answer(r"GROUP BY v COLLATE", [], ["lo", "hi"], once=False)
    recorder.answer(r"dm_db_log_space_usage", [found.get("log", (None, None))], ["max", "used"])
    recorder.answer(r"dm_db_partition_stats", [(found.get("size", 0),)], ["b"], once=False)
    for table in planned:
        rows = found.get("auto_statistics", []) if table == "JobsHot" else []
        recorder.answer(r"auto_created = 1", rows, ["s", "c"])


def refused(mssql: Storage, recorder: Recorder, **found: Any) -> str:
    upgrade_from_2(recorder)
    catalogue(recorder, mssql.engine)
    clear_checks(recorder, mssql.engine, **found)
    with pytest.raises(ConfigurationError) as err:
        mssql.upgrade()
    message = str(err.value)
    assert "\n" not in message and message.startswith("migration 3 (SQL Server keys to Latin1_General_100_BIN2)")
    assert "nothing was changed" in message
    sent = [c.sql for c in recorder.statements]
    assert not [s for s in sent if DDL.search(s)], [s for s in sent if DDL.search(s)]
    assert not [c for c in recorder.calls if c.kind == "commit"], "a refusal commits nothing"
    assert "sp_releaseapplock" in sent[-2] or "sp_releaseapplock" in sent[-1]
    return message


def test_live_workers_are_refused_with_stop_them_first(mssql: Storage, recorder: Recorder) -> None:
    message = refused(mssql, recorder, live=[("host-a:1234",)])
    assert "workers are running (host-a:1234" in message and "stop every worker and the Functions app" in message


def test_a_dbas_index_and_an_azure_tuning_index_are_refused_with_the_drop(mssql: Storage, recorder: Recorder) -> None:
    indexes = [
        ("nci_wi_JobsHot_5A1B", "Queue", None),
        ("IX_dba_type", "Priority", "([Type]='report')"),  # only its filter uses a converted column
        ("IX_JobsHot_Fetch", "Queue", None),  # chokaq's own: dropped and made again by the step
        ("IX_dba_priority", "Priority", None),  # no converted column: left alone
    ]
    message = refused(mssql, recorder, indexes=indexes)
    assert "index nci_wi_JobsHot_5A1B on chokaq.JobsHot (Queue) is not chokaq's (Azure automatic tuning)" in message
    assert "DROP INDEX [nci_wi_JobsHot_5A1B] ON chokaq.JobsHot" in message
    assert "index IX_dba_type on chokaq.JobsHot (Type)" in message
    assert "IX_JobsHot_Fetch" not in message and "IX_dba_priority" not in message


def test_user_statistics_on_a_converted_column_are_refused(mssql: Storage, recorder: Recorder) -> None:
    message = refused(mssql, recorder, statistics=[("st_queue", "Queue"), ("st_priority", "Priority")])
    assert "statistics st_queue on chokaq.JobsHot cover a converted column" in message
    assert "DROP STATISTICS chokaq.JobsHot.[st_queue]" in message and "st_priority" not in message


def test_a_schemabinding_view_and_a_foreign_key_are_refused(mssql: Storage, recorder: Recorder) -> None:
    bound = [
        ("reports", "v_queue_depth", "VIEW", "Queue"),
        ("reports", "FK_Billing_Job", "FOREIGN_KEY_CONSTRAINT", None),
        ("reports", "v_payloads", "VIEW", "Payload"),  # a column that stays as it is
    ]
    message = refused(mssql, recorder, bound=bound)
    view = "view reports.v_queue_depth is bound to chokaq.JobsHot: drop it (or ALTER it without SCHEMABINDING)"
    assert view in message
    # The job tables' keys are rebuilt (Id changes collation): a foreign key onto them stops that.
    assert "foreign key FK_Billing_Job is bound to chokaq.JobsHot" in message
    assert "v_payloads" not in message


def test_case_variant_queue_names_are_refused(mssql: Storage, recorder: Recorder) -> None:
    message = refused(mssql, recorder, variants=[("Emails", "emails")])
    assert "the queue names 'Emails' and 'emails' differ only in case" in message
    # Asked once per name family, across every table holding such names, compared both ways.
    (queues,) = [c.sql for c in recorder.statements if "GROUP BY v COLLATE" in c.sql and "[Queues]" in c.sql]
    for table in ("Queues", "StatsSummary", "Schedules", "JobsHot", "JobsArchive", "JobsDLQ"):
        assert f"FROM chokaq.[{table}]" in queues
    assert f"COLLATE {KEY_COLLATION} AS v" in queues and "GROUP BY v COLLATE Latin1_General_100_CI_AS" in queues


def test_a_log_too_small_for_the_largest_table_is_refused(mssql: Storage, recorder: Recorder) -> None:
    message = refused(mssql, recorder, log=(1000 * MB, 900 * MB), size=200 * MB)
    assert "the transaction log has 100 MB left to grow" in message and "(200 MB) may write about 600 MB" in message


def test_every_problem_is_named_at_once(mssql: Storage, recorder: Recorder) -> None:
    message = refused(
        mssql, recorder, live=[("w1",)], statistics=[("st_queue", "Queue")], variants=[("Emails", "emails")]
    )
    assert "workers are running" in message and "st_queue" in message and "'Emails'" in message


def test_a_clear_database_converts_one_table_per_transaction(mssql: Storage, recorder: Recorder) -> None:
    upgrade_from_2(recorder)
    catalogue(recorder, mssql.engine)
    auto = [("_WA_Sys_0002_ab", "Queue")]
    clear_checks(recorder, mssql.engine, log=(10_000 * MB, 10 * MB), size=50 * MB, auto_statistics=auto)
    assert mssql.upgrade() == [v for v, _, _ in MIGRATIONS if v == 3]
    calls = [c for c in recorder.calls if c.kind in ("execute", "executemany", "commit")]
    # Between two commits, one table's DDL: a crash loses at most the table in progress.
    steps: list[set[str]] = [set()]
    for c in calls:
        if c.kind == "commit":
            steps.append(set())
        elif DDL.search(c.sql):
            steps[-1].update(re.findall(r"chokaq\.\[(\w+)\]", c.sql))
    converted = [s for s in steps if s]
    assert all(len(s) == 1 for s in converted), converted
    assert {"JobsHot", "JobsArchive", "JobsDLQ", "Queues", "AuditLog"} <= set().union(*converted)
    sent = [c.sql for c in recorder.statements]
    # Statistics SQL Server made by itself are dropped (it makes them again); the pre-checks first.
    drop_stats = sent.index("DROP STATISTICS chokaq.[JobsHot].[_WA_Sys_0002_ab]")
    assert max(i for i, s in enumerate(sent) if "dm_db_log_space_usage" in s) < drop_stats
    assert sent.index("ALTER TABLE chokaq.[JobsHot] DROP CONSTRAINT [PK_JobsHot]") > drop_stats


def test_a_resumed_upgrade_goes_on_from_the_first_table_not_converted(mssql: Storage, recorder: Recorder) -> None:
    upgrade_from_2(recorder)
    done = frozenset(t.name for t in metadata.sorted_tables if t.name != "JobsArchive")
    catalogue(recorder, mssql.engine, converted=done)
    clear_checks(recorder, mssql.engine)
    assert mssql.upgrade() == [3]
    ddl = [c.sql for c in recorder.statements if DDL.search(c.sql)]
    assert ddl and all("chokaq.[JobsArchive]" in s for s in ddl), ddl


def test_a_current_database_gets_no_ddl(mssql: Storage, recorder: Recorder) -> None:
    # Migration 3 run against a database already in the current form (a new database, or a rerun):
    # no ALTER INDEX ... OPTIMIZE_FOR_SEQUENTIAL_KEY, nothing but the catalogue reads.
    upgrade_from_2(recorder)
    catalogue(recorder, mssql.engine, converted=frozenset(t.name for t in metadata.sorted_tables))
    assert mssql.upgrade() == [3]
    sent = [c.sql for c in recorder.statements]
    assert not [s for s in sent if DDL.search(s)], [s for s in sent if DDL.search(s)]
    assert not [s for s in sent if "sys.index_columns" in s or "GROUP BY v" in s], "no pre-checks for no work"


def test_a_version_2_database_upgrades_to_the_indexes_a_new_one_gets(mssql: Storage, recorder: Recorder) -> None:
    # Version 2 lacks JobsArchive.ScheduledAtUtc (migration 4), which the archive indexes include
    # since 13, and IX_JobsDLQ_ZombieWorker (7) and IX_JobsDLQ_Reason (14). Migration 3 used to
    # rebuild the indexes from the current definitions: CREATE INDEX ... INCLUDE ([ScheduledAtUtc])
    # on a table without it (Msg 1911), the table's step rolled back, every upgrade stopped there.
    recorder.answer(r"PARSENAME\(CAST\(SERVERPROPERTY", [(16, 3, 160, "chokaq")], ["v", "e", "l", "d"])
    recorder.answer(r"sp_getapplock", [(0,)])
    recorder.answer(r"FROM chokaq\.\[SchemaMigrations\]", [(1,), (2,)], ["Version"])
    database = Version2(recorder, mssql.engine.dialect)
    database.script()
    clear_checks(recorder, mssql.engine, log=(10_000 * MB, 10 * MB), size=50 * MB)
    at_2 = {t: set(found) for t, found in database.replay().indexes.items()}

    assert mssql.upgrade() == [v for v, _, _ in MIGRATIONS if v > 2]

    database.replay()
    assert not database.refused, database.refused
    sent = [c.sql for c in recorder.statements]
    inserts = [i for i, c in enumerate(recorder.statements) if "INSERT INTO chokaq.[SchemaMigrations]" in c.sql]
    third = next(i for i in inserts if recorder.statements[i].params[0][0] == 3)
    made_by_3 = [parse(s) for s in sent[:third] if s.startswith(("CREATE INDEX", "CREATE UNIQUE INDEX"))]
    # Migration 3 builds again only what the table had, and only with the columns it has.
    assert {(t, n) for t, n, _ in made_by_3} >= {
        ("JobsArchive", "IX_JobsArchive_FinishedAt"),
        ("JobsHot", "IX_JobsHot_Fetch"),
    }
    assert all(n in at_2[t] and n not in LATER_INDEXES for t, n, _ in made_by_3), made_by_3
    archive = dict((n, d) for t, n, d in made_by_3 if t == "JobsArchive")
    assert archive["IX_JobsArchive_FinishedAt"][3] == {"StartedAtUtc", "CreatedAtUtc", "DurationMs"}
    # Migration 13 then includes the due time, which migration 4 added meanwhile.
    rebuilt = [parse(s) for s in sent[third:] if "DROP_EXISTING = ON" in s]
    assert {n for _, n, d in rebuilt if "ScheduledAtUtc" in d[3]} == {
        "IX_JobsArchive_FinishedAt",
        "IX_JobsArchive_QueueFinished",
    }
    # The end: every table, column and index as a new database gets them.
    assert database.indexes == fresh(mssql.engine.dialect)
    assert database.columns == {t.name: {c.name for c in t.columns} for t in metadata.sorted_tables}
