"""What migration 3 (:mod:`.sqlserver_keys`) refuses before it changes anything.

Each check reads the catalogue (or chokaq's own rows) and answers with what it found and the
statement that fixes it. Everything found is reported at once, as one line, and nothing has been
changed: the operator fixes it and runs `chokaq db upgrade` again (docs/sqlserver.md, the runbook).

* live workers: a conversion holds a schema-modification lock on each table while it rewrites it,
  so every claim, heartbeat and completion would wait behind it; workers are stopped first;
* indexes chokaq did not make (a DBA's, Azure automatic tuning's ``nci_wi_*``), statistics a user
  created, and objects bound to a column (SCHEMABINDING views and functions, foreign keys from
  other tables): ``ALTER COLUMN`` refuses to change a column they use (Msg 5074 / 4922);
* case variants: the old case-insensitive collation made ``emails`` and ``Emails`` one queue (or
  type); after it they are two, and jobs lose their queue's pause, MaxWorkers and zombie timeout;
* the transaction log: the largest table's step must fit in what the log may still grow to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy import Connection, text

from chokaq.domain.errors import ConfigurationError
from chokaq.storage.schema import KEY_COLLATION, SCHEMA

if TYPE_CHECKING:
    from chokaq.storage.dialects.sqlserver_keys import TablePlan

# A worker that has not been seen for this long is taken for gone (a crash leaves its row live).
LIVE_WITHIN_SECONDS = 120
# Log a table's step may write, as a multiple of the table's size: the key dropped (a heap
# rewrite), the columns altered, the key built again. An estimate: see docs/sqlserver.md.
LOG_PER_TABLE_BYTE = 3
CASE_INSENSITIVE = "Latin1_General_100_CI_AS"

# Names that mean one thing to chokaq and must stay one name each after the conversion.
KEY_FAMILIES: dict[str, tuple[tuple[str, str], ...]] = {
    "queue name": (
        ("Queues", "Name"),
        ("StatsSummary", "Queue"),
        ("Schedules", "Queue"),
        ("JobsHot", "Queue"),
        ("JobsArchive", "Queue"),
        ("JobsDLQ", "Queue"),
    ),
    "job type": (
        ("CircuitBreakers", "JobType"),
        ("Schedules", "JobType"),
        ("JobsHot", "Type"),
        ("JobsArchive", "Type"),
        ("JobsDLQ", "Type"),
    ),
    "idempotency key": (("JobsHot", "IdempotencyKey"),),
}

_LIVE = text(
    f"IF OBJECT_ID(N'{SCHEMA}.Workers') IS NOT NULL "
    f"SELECT TOP 5 WorkerId FROM {SCHEMA}.Workers WHERE State = 'live' "
    f"AND LastSeenUtc > DATEADD(SECOND, -{LIVE_WITHIN_SECONDS}, SYSUTCDATETIME()) "
    f"ELSE SELECT DISTINCT TOP 5 WorkerId FROM {SCHEMA}.JobsHot WHERE Status IN (1, 2) "
    f"AND LastUpdatedUtc > DATEADD(SECOND, -{LIVE_WITHIN_SECONDS}, SYSUTCDATETIME())"
)
# Every index but the primary key: name, column (key, included) and the filter's text.
_INDEXES = text(
    "SELECT i.name, c.name, i.filter_definition FROM sys.indexes AS i "
    "JOIN sys.index_columns AS ic ON ic.object_id = i.object_id AND ic.index_id = i.index_id "
    "JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id "
    "WHERE i.object_id = OBJECT_ID(:t) AND i.is_primary_key = 0 AND i.name IS NOT NULL"
)
_USER_STATISTICS = text(
    "SELECT DISTINCT s.name, c.name FROM sys.stats AS s "
    "JOIN sys.stats_columns AS sc ON sc.object_id = s.object_id AND sc.stats_id = s.stats_id "
    "JOIN sys.columns AS c ON c.object_id = sc.object_id AND c.column_id = sc.column_id "
    "WHERE s.object_id = OBJECT_ID(:t) AND s.user_created = 1"
)
# Objects bound to the table: schema-bound references (views, functions, computed columns, check
# constraints; column NULL for the whole table) and foreign keys from other tables.
_BOUND = text(
    "SELECT OBJECT_SCHEMA_NAME(d.referencing_id), OBJECT_NAME(d.referencing_id), o.type_desc, "
    "COL_NAME(d.referenced_id, d.referenced_minor_id) FROM sys.sql_expression_dependencies AS d "
    "JOIN sys.objects AS o ON o.object_id = d.referencing_id "
    "WHERE d.referenced_id = OBJECT_ID(:t) AND d.is_schema_bound_reference = 1 "
    "UNION ALL SELECT OBJECT_SCHEMA_NAME(f.parent_object_id), f.name, 'FOREIGN_KEY_CONSTRAINT', NULL "
    "FROM sys.foreign_keys AS f WHERE f.referenced_object_id = OBJECT_ID(:t)"
)
# What the log may still grow to, when the server says (NULL: unlimited growth or no permission to
# ask: VIEW DATABASE STATE); the table sizes the same way. NOCOUNT: the assignments' row counts
# would otherwise come first, before the one result.
_LOG = text(
    "SET NOCOUNT ON; DECLARE @max bigint, @used bigint; BEGIN TRY "
    "SELECT @max = CASE WHEN MIN(max_size) = -1 THEN NULL ELSE SUM(CAST(max_size AS bigint)) * 8192 END "
    "FROM sys.database_files WHERE type = 1; "
    "SELECT @used = used_log_space_in_bytes FROM sys.dm_db_log_space_usage; "
    "END TRY BEGIN CATCH SELECT @max = NULL; END CATCH; SET NOCOUNT OFF; SELECT @max, @used"
)
_SIZE = text(
    "SET NOCOUNT ON; DECLARE @b bigint; BEGIN TRY SELECT @b = SUM(reserved_page_count) * 8192 "
    "FROM sys.dm_db_partition_stats WHERE object_id = OBJECT_ID(:t); END TRY BEGIN CATCH SELECT @b = NULL; "
    "END CATCH; SET NOCOUNT OFF; SELECT @b"
)


def refuse_unsafe(conn: Connection, plans: Sequence[TablePlan]) -> None:
    """Raise :class:`ConfigurationError` naming every problem and its fix; changes nothing."""
    problems = _live_workers(conn)
    for p in plans:
        problems += _foreign_indexes(conn, p) + _statistics(conn, p) + _bound(conn, p)
    problems += _case_variants(conn, plans) + _log_space(conn, plans)
    if problems:
        raise ConfigurationError(
            "migration 3 (SQL Server keys to "
            + KEY_COLLATION
            + ") refused, nothing was changed: "
            + "; ".join(problems)
            + ". Fix these, then run `chokaq db upgrade` again (docs/sqlserver.md, 'Migration 3')"
        )


def _live_workers(conn: Connection) -> list[str]:
    live = [str(r[0]) for r in conn.execute(_LIVE).all()]
    if not live:
        return []
    return [
        f"workers are running ({', '.join(live)} seen in the last {LIVE_WITHIN_SECONDS} s): stop every "
        "worker and the Functions app first (the conversion locks each table while it rewrites it)"
    ]


def _foreign_indexes(conn: Connection, p: TablePlan) -> list[str]:
    ours = {str(i.name) for i in p.table.indexes}
    changed = {c.name for c in p.changed}
    found: dict[str, set[str]] = {}
    for name, column, where in conn.execute(_INDEXES, {"t": p.qualified}).all():
        if str(name) in ours:
            continue
        uses = {str(column)} | {c for c in changed if f"[{c}]" in str(where or "")}
        if uses & changed:
            found.setdefault(str(name), set()).update(uses & changed)
    return [
        f"index {name} on {p.qualified} ({', '.join(sorted(cols))}) is not chokaq's"
        + (" (Azure automatic tuning)" if name.startswith("nci_wi_") else "")
        + f": DROP INDEX [{name}] ON {p.qualified}, and create it again after the upgrade if still needed"
        for name, cols in sorted(found.items())
    ]


def _statistics(conn: Connection, p: TablePlan) -> list[str]:
    changed = {c.name for c in p.changed}
    rows = conn.execute(_USER_STATISTICS, {"t": p.qualified}).all()
    names = sorted({str(s) for s, column in rows if column in changed})
    return [
        f"statistics {s} on {p.qualified} cover a converted column: DROP STATISTICS {p.qualified}.[{s}], "
        "and create them again after the upgrade"
        for s in names
    ]


def _bound(conn: Connection, p: TablePlan) -> list[str]:
    changed = {c.name for c in p.changed}
    out: list[str] = []
    for schema, name, kind, column in conn.execute(_BOUND, {"t": p.qualified}).all():
        foreign_key = kind == "FOREIGN_KEY_CONSTRAINT"
        if (foreign_key and not p.rebuild_pk) or (column is not None and column not in changed):
            continue
        what = f"foreign key {name}" if foreign_key else f"{str(kind).lower().replace('_', ' ')} {schema}.{name}"
        how = (
            "drop it and add it again after the upgrade"
            if foreign_key
            else "drop it (or ALTER it without SCHEMABINDING) and create it again after the upgrade"
        )
        out.append(f"{what} is bound to {p.qualified}: {how}")
    return out


def _case_variants(conn: Connection, plans: Sequence[TablePlan]) -> list[str]:
    converting = {(p.table.name, c.name) for p in plans for c in p.changed}
    present = {p.table.name: {c.name for c in p.table.columns} for p in plans}
    out: list[str] = []
    for family, members in KEY_FAMILIES.items():
        if not converting & set(members):
            continue  # every member compares exactly already
        # Members in the tables this upgrade converts: a table made later (by its own migration)
        # does not exist yet, and one already converted was checked before its step.
        parts = [
            f"SELECT DISTINCT [{col}] COLLATE {KEY_COLLATION} AS v FROM {SCHEMA}.[{table}]"
            for table, col in members
            if col in present.get(table, ())
        ]
        sql = (
            f"SELECT TOP 10 MIN(v), MAX(v) FROM ({' UNION ALL '.join(parts)}) AS u "
            f"GROUP BY v COLLATE {CASE_INSENSITIVE} HAVING MIN(v) <> MAX(v)"
        )
        for low, high in conn.execute(text(sql)).all():
            out.append(
                f"the {family}s '{low}' and '{high}' differ only in case: one {family} today, two after the "
                f"conversion; rename one so they match exactly (or finish or purge its jobs)"
            )
    return out


def _log_space(conn: Connection, plans: Sequence[TablePlan]) -> list[str]:
    row = conn.execute(_LOG).first()
    if row is None or row[0] is None or row[1] is None:
        return []  # unlimited growth, or not ours to see: the runbook says how to look
    free = int(row[0]) - int(row[1])
    sizes = [(int(s or 0), p.qualified) for p in plans for s in [conn.execute(_SIZE, {"t": p.qualified}).scalar()]]
    size, name = max(sizes, default=(0, ""))
    need = LOG_PER_TABLE_BYTE * size
    if need <= free:
        return []
    mb = 1024 * 1024
    return [
        f"the transaction log has {free // mb} MB left to grow and converting {name} ({size // mb} MB) may "
        f"write about {need // mb} MB: purge old archived jobs first (chokaq retention), or raise the log's "
        "maximum size (or the Azure SQL service objective)"
    ]
