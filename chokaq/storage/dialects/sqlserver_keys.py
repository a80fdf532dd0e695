"""Migration 3 on SQL Server: NVARCHAR for user text, the binary collation for keys, and
OPTIMIZE_FOR_SEQUENTIAL_KEY on the appended-to clustered keys, for databases made before them.

SQL Server cannot change a column that an index or the primary key uses, so for each table the
affected indexes and the key are dropped, the columns altered and both created again from the
current definitions as far as the table can hold them now: only the indexes the table has (those
of later migrations are theirs to make), and without included columns a later migration adds
(migration 13 compares the indexes with the catalogue and rebuilds what differs). Each table is
one step in its own transaction, committed before the next: a crash or a deadlock victim loses at
most the table in progress, and the next `chokaq db upgrade` reads the catalogue and goes on from
there (a converted table is left alone). Before any step,
:mod:`.sqlserver_upgrade_checks` refuses what would fail half way or change behaviour silently.
A database already in the current form sends no DDL at all (docs/sqlserver.md, the runbook).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Connection, Index, MetaData, Table, Unicode, text
from sqlalchemy.engine import Dialect
from sqlalchemy.schema import DDL, CreateIndex, DropIndex

from chokaq.storage.schema import (
    KEY_COLLATION,
    SCHEMA,
    SEQUENTIAL_KEY,
    MssqlAsciiKey,
    MssqlKey,
    metadata,
    sequential_key_supported,
)

_COLUMNS = text(
    "SELECT c.name, t.name, c.collation_name FROM sys.columns AS c "
    "JOIN sys.types AS t ON t.user_type_id = c.user_type_id WHERE c.object_id = OBJECT_ID(:t)"
)
# The key and whether it has the sequential option (sys.indexes has the column from 2019 on).
_PRIMARY_KEY = text(
    "SELECT k.name, i.optimize_for_sequential_key FROM sys.key_constraints AS k JOIN sys.indexes AS i "
    "ON i.object_id = k.parent_object_id AND i.index_id = k.unique_index_id "
    "WHERE k.parent_object_id = OBJECT_ID(:t) AND k.type = 'PK'"
)
_PRIMARY_KEY_2017 = text(
    "SELECT name, 0 FROM sys.key_constraints WHERE parent_object_id = OBJECT_ID(:t) AND type = 'PK'"
)
# The table's indexes as they are (a version-2 database lacks those later migrations make).
_INDEX_NAMES = text(
    "SELECT i.name FROM sys.indexes AS i WHERE i.object_id = OBJECT_ID(:t) AND i.is_primary_key = 0 "
    "AND i.name IS NOT NULL"
)
# Statistics SQL Server made by itself on a column (not an index's): ALTER COLUMN refuses to change
# a column they cover, and the optimizer makes them again when a query needs them.
_AUTO_STATISTICS = text(
    "SELECT DISTINCT s.name, c.name FROM sys.stats AS s "
    "JOIN sys.stats_columns AS sc ON sc.object_id = s.object_id AND sc.stats_id = s.stats_id "
    "JOIN sys.columns AS c ON c.object_id = sc.object_id AND c.column_id = sc.column_id "
    "WHERE s.object_id = OBJECT_ID(:t) AND s.auto_created = 1"
)


@dataclass(frozen=True)
class TablePlan:
    """What one table still needs (read from the catalogue, so a resumed upgrade sees its progress)."""

    table: Table
    present: frozenset[str]  # the columns the table has now
    changed: tuple[Column[Any], ...]
    pk_name: str | None
    sequential_missing: bool  # the key lacks OPTIMIZE_FOR_SEQUENTIAL_KEY the definitions give it

    @property
    def rebuild_pk(self) -> bool:
        return bool({c.name for c in self.changed} & {c.name for c in self.table.primary_key.columns})

    @property
    def qualified(self) -> str:
        return f"{SCHEMA}.{self.table.name}"


def _wanted(column: Column[Any], dialect: Dialect) -> tuple[str, str | None] | None:
    """(type name, collation or None for the database default) this column should have."""
    # The mssql variant of the column's type (dialect_impl() answers with the base type's impl).
    impl = getattr(column.type, "_variant_mapping", {}).get(dialect.name, column.type)
    if isinstance(impl, MssqlAsciiKey):
        return "varchar", KEY_COLLATION
    if isinstance(impl, MssqlKey):
        return "nvarchar", KEY_COLLATION
    if isinstance(column.type, Unicode) and column.type.length is not None:
        return "nvarchar", None
    return None


def current_columns(conn: Connection, table: Table) -> dict[str, tuple[str, str | None]]:
    """name -> (type name, collation) as the server has them; empty when the table does not exist."""
    rows = conn.execute(_COLUMNS, {"t": f"{SCHEMA}.{table.name}"}).all()
    return {str(name): (str(type_name).lower(), collation) for name, type_name, collation in rows}


def _changed(conn: Connection, table: Table, current: dict[str, tuple[str, str | None]]) -> list[Column[Any]]:
    out: list[Column[Any]] = []
    for column in table.columns:
        wanted = _wanted(column, conn.dialect)
        if wanted is None or column.name not in current:
            continue
        type_name, collation = current[column.name]
        if type_name != wanted[0] or (wanted[1] is not None and collation != wanted[1]):
            out.append(column)
    return out


def plan(conn: Connection) -> list[TablePlan]:
    """The tables with something left to do, in dependency order."""
    sequential = sequential_key_supported(conn.dialect)
    out: list[TablePlan] = []
    for table in metadata.sorted_tables:
        current = current_columns(conn, table)
        if not current:
            continue  # made later by its own migration, from the current definitions
        changed = _changed(conn, table, current)
        wants_sequential = bool(table.info.get(SEQUENTIAL_KEY)) and sequential
        if not changed and not wants_sequential:
            continue
        key = conn.execute(_PRIMARY_KEY if sequential else _PRIMARY_KEY_2017, {"t": f"{SCHEMA}.{table.name}"}).first()
        pk_name = None if key is None else str(key[0])
        missing = wants_sequential and key is not None and not key[1]
        if changed or missing:
            out.append(TablePlan(table, frozenset(current), tuple(changed), pk_name, missing))
    return out


def upgrade_keys_and_text(conn: Connection) -> None:
    from chokaq.storage.dialects.sqlserver_upgrade_checks import refuse_unsafe

    plans = plan(conn)
    if not plans:
        return  # the current form already: no DDL, no schema-modification lock
    refuse_unsafe(conn, [p for p in plans if p.changed])
    # What migrations 1 and 2 did, and each table's step, committed on its own: the migration
    # lock is the session's (sqlserver.py), so it holds across these commits.
    conn.commit()
    for p in plans:
        convert_table(conn, p)
        conn.commit()


def _as_the_table_stands(table: Table, present: frozenset[str]) -> dict[str, Index]:
    """The table's indexes by name, on a detached copy (the shared definitions stay as they are),
    each including only columns the table has: the rest are a later migration's (4 adds
    JobsArchive.ScheduledAtUtc, which the archive indexes include since 13)."""
    copy = table.to_metadata(MetaData())
    for index in copy.indexes:
        include = index.dialect_options["mssql"]["include"] or ()
        index.dialect_kwargs["mssql_include"] = [c for c in include if getattr(c, "name", c) in present]
    return {str(i.name): i for i in copy.indexes}


def convert_table(conn: Connection, p: TablePlan) -> None:
    """One table's step. Idempotent: run again after a crash it finds its own work done."""
    prep = conn.dialect.identifier_preparer
    types = conn.dialect.type_compiler_instance
    table, quoted = p.table, prep.format_table(p.table)
    names = {c.name for c in p.changed}
    found = {str(row[0]) for row in conn.execute(_INDEX_NAMES, {"t": p.qualified}).all()}
    # Rebuilding the clustered key rebuilds every other index on the table (they point at it),
    # so then all are dropped first and built once at the end.
    touched = [
        i
        for name, i in _as_the_table_stands(table, p.present).items()
        if name in found and (p.rebuild_pk or names & {c.name for c in i.columns})
    ]
    indexes = sorted(touched, key=lambda i: str(i.name))
    for index in indexes:
        conn.execute(DropIndex(index, if_exists=True))
    if names:
        for stat, column in conn.execute(_AUTO_STATISTICS, {"t": p.qualified}).all():
            if column in names:
                conn.exec_driver_sql(f"DROP STATISTICS {quoted}.{prep.quote(str(stat))}")
    if p.rebuild_pk and p.pk_name is not None:
        conn.exec_driver_sql(f"ALTER TABLE {quoted} DROP CONSTRAINT {prep.quote(p.pk_name)}")
    for column in p.changed:
        spec = types.process(column.type, type_expression=column)
        null = "NULL" if column.nullable else "NOT NULL"
        conn.exec_driver_sql(f"ALTER TABLE {quoted} ALTER COLUMN {prep.quote(column.name)} {spec} {null}")
    if p.rebuild_pk:
        # Not AddConstraint(table.primary_key): that marks the shared definition as "added
        # later", and CREATE TABLE would then leave the key out for every later database.
        key = conn.dialect.ddl_compiler(conn.dialect, DDL("")).process(table.primary_key)  # type: ignore[no-untyped-call]
        conn.exec_driver_sql(f"ALTER TABLE {quoted} ADD {key}")
    elif p.sequential_missing and p.pk_name is not None:
        conn.exec_driver_sql(f"ALTER INDEX {prep.quote(p.pk_name)} ON {quoted} SET (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)")
    for index in indexes:
        conn.execute(CreateIndex(index))
