"""Migration 3 on SQL Server: NVARCHAR for user text, the binary collation for keys, and
OPTIMIZE_FOR_SEQUENTIAL_KEY on the appended-to clustered keys, for databases made before them.

SQL Server cannot change a column that an index or the primary key uses, so for each table the
affected indexes and the key are dropped, the columns altered and both created again from the
current definitions, inside the migration's transaction. Converting VARCHAR to NVARCHAR rewrites
every row: on a large JobsArchive purge first or run it in a quiet hour (docs/sqlserver.md).
A table already in the current form is left alone, so a new database pays only the checks.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, Connection, Table, Unicode, text
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
_PRIMARY_KEY = text("SELECT name FROM sys.key_constraints WHERE parent_object_id = OBJECT_ID(:t) AND type = 'PK'")


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


def _changed(conn: Connection, table: Table) -> list[Column[Any]]:
    current = {str(name): (str(type_name).lower(), collation) for name, type_name, collation in
               conn.execute(_COLUMNS, {"t": f"{SCHEMA}.{table.name}"}).all()}  # fmt: skip
    out: list[Column[Any]] = []
    for column in table.columns:
        wanted = _wanted(column, conn.dialect)
        if wanted is None or column.name not in current:
            continue
        type_name, collation = current[column.name]
        if type_name != wanted[0] or (wanted[1] is not None and collation != wanted[1]):
            out.append(column)
    return out


def upgrade_keys_and_text(conn: Connection) -> None:
    prep = conn.dialect.identifier_preparer
    types = conn.dialect.type_compiler_instance
    for table in metadata.sorted_tables:
        qualified = prep.format_table(table)
        changed = _changed(conn, table)
        names = {c.name for c in changed}
        rebuild_pk = bool(names & {c.name for c in table.primary_key.columns})
        # Rebuilding the clustered key rebuilds every other index on the table (they point at it),
        # so then all are dropped first and built once at the end.
        touched = [i for i in table.indexes if rebuild_pk or names & {c.name for c in i.columns}]
        indexes = sorted(touched, key=lambda i: str(i.name))
        for index in indexes:
            conn.execute(DropIndex(index, if_exists=True))
        if rebuild_pk:
            pk_name = conn.execute(_PRIMARY_KEY, {"t": f"{SCHEMA}.{table.name}"}).scalar()
            if pk_name is not None:
                conn.exec_driver_sql(f"ALTER TABLE {qualified} DROP CONSTRAINT {prep.quote(str(pk_name))}")
        for column in changed:
            spec = types.process(column.type, type_expression=column)
            null = "NULL" if column.nullable else "NOT NULL"
            conn.exec_driver_sql(f"ALTER TABLE {qualified} ALTER COLUMN {prep.quote(column.name)} {spec} {null}")
        if rebuild_pk:
            # Not AddConstraint(table.primary_key): that marks the shared definition as "added
            # later", and CREATE TABLE would then leave the key out for every later database.
            key = conn.dialect.ddl_compiler(conn.dialect, DDL("")).process(table.primary_key)  # type: ignore[no-untyped-call]
            conn.exec_driver_sql(f"ALTER TABLE {qualified} ADD {key}")
        elif table.info.get(SEQUENTIAL_KEY) and sequential_key_supported(conn.dialect):
            pk_name = conn.execute(_PRIMARY_KEY, {"t": f"{SCHEMA}.{table.name}"}).scalar()
            if pk_name is not None:
                conn.exec_driver_sql(
                    f"ALTER INDEX {prep.quote(str(pk_name))} ON {qualified} SET (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)"
                )
        for index in indexes:
            conn.execute(CreateIndex(index))
