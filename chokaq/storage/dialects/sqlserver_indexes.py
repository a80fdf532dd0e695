"""Migration 13 on SQL Server: the index definitions chokaq's statements now rely on, for databases
made before them.

- ``IX_JobsHot_Fetch`` includes ``Type``: every claim reads it (the claim's one index and lock
  order, docs/sqlserver.md), and the breaker filter then never needs the clustered row.
- ``IX_JobsArchive_FinishedAt`` and ``IX_JobsArchive_QueueFinished`` include the history's
  StartedAtUtc, ScheduledAtUtc, CreatedAtUtc and DurationMs; ``IX_JobsDLQ_FailedAt`` its
  FailureReason: the Deck's charts read a range of one index, not the clustered tables.
- ``OPTIMIZE_FOR_SEQUENTIAL_KEY = ON`` on the secondary indexes whose first key only grows
  (SQL Server 2019+ and Azure SQL; 2017 has no such option).

The catalogue is read first (one query per table) and only an index that differs is touched: a
changed INCLUDE list is ``CREATE INDEX ... WITH (DROP_EXISTING = ON)`` from the current definition
(one rebuild, no window without the index), a missing option alone is ``ALTER INDEX ... SET``
(metadata only). A database made by step 1 from the current definitions gets no DDL at all.
"""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import Connection, Index, Table, text
from sqlalchemy.schema import CreateIndex

from chokaq.storage.schema import SCHEMA, audit_log, jobs_archive, jobs_dlq, jobs_hot, sequential_key_supported

# Index name, its option, and one included column per row (NULL: none). 2017 has no option column.
_CATALOGUE = (
    "SELECT i.[name], {option}, c.[name] FROM sys.indexes AS i "
    "LEFT JOIN sys.index_columns AS ic ON ic.[object_id] = i.[object_id] AND ic.[index_id] = i.[index_id] "
    "AND ic.[is_included_column] = 1 "
    "LEFT JOIN sys.columns AS c ON c.[object_id] = ic.[object_id] AND c.[column_id] = ic.[column_id] "
    "WHERE i.[object_id] = OBJECT_ID(:t) AND i.[name] IS NOT NULL"
)
TABLES: tuple[Table, ...] = (jobs_hot, jobs_archive, jobs_dlq, audit_log)


def wanted(index: Index) -> tuple[frozenset[str], bool]:
    """``(included columns, sequential key)`` as the current definition declares them."""
    options = index.dialect_options["mssql"]
    return frozenset(options["include"] or ()), bool(options["sequential_key"])


def statements(conn: Connection) -> list[str]:
    """The DDL that brings this database's indexes on :data:`TABLES` to their current definitions
    (empty when they are)."""
    supported = sequential_key_supported(conn.dialect)
    option = "i.[optimize_for_sequential_key]" if supported else "CAST(0 AS bit)"
    query = text(_CATALOGUE.format(option=option))
    prep = conn.dialect.identifier_preparer
    out: list[str] = []
    for table in TABLES:
        found: dict[str, tuple[set[str], bool]] = defaultdict(lambda: (set(), False))
        for name, flag, included in conn.execute(query, {"t": f"{SCHEMA}.{table.name}"}).all():
            columns = found[str(name)][0]
            if included is not None:
                columns.add(str(included))
            found[str(name)] = (columns, bool(flag))
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            include, sequential = wanted(index)
            sequential = sequential and supported
            if not include and not sequential:
                continue
            create = str(CreateIndex(index).compile(dialect=conn.dialect))
            if str(index.name) not in found:
                out.append(create)
                continue
            has_columns, has_option = found[str(index.name)]
            if set(has_columns) != set(include):
                out.append(_drop_existing(create))
            elif sequential and not has_option:
                out.append(
                    f"ALTER INDEX {prep.quote(str(index.name))} ON {prep.format_table(table)} "
                    "SET (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)"
                )
    return out


def _drop_existing(create: str) -> str:
    """``CREATE INDEX`` as a rebuild of the index of that name (built beside the old one, swapped in)."""
    if create.endswith(")") and " WITH (" in create:
        return create.replace(" WITH (", " WITH (DROP_EXISTING = ON, ", 1)
    return f"{create} WITH (DROP_EXISTING = ON)"


def upgrade_indexes(conn: Connection) -> None:
    for sql in statements(conn):
        conn.exec_driver_sql(sql)
