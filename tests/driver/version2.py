"""A SQL Server database at version 2 as the recording driver's catalogue: the tables, columns and
indexes it has, kept up to date by replaying the DDL sent since, and refusing what SQL Server
refuses (an index on a column the table lacks, Msg 1911; an index made twice, Msg 1913).

Version 2 had neither the columns migrations 4, 6 and 9 add, nor the tables of migrations 5, 7, 8,
10 and 12, nor the indexes of 7 and 14; its indexes had the current keys and filters, without the
INCLUDE lists and sequential-key options migration 13 brings.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.schema import CreateIndex

from chokaq.storage.dialects.sqlserver_keys import _wanted
from chokaq.storage.schema import metadata
from tests.driver.recording import Call, Recorder, Rows

LATER_COLUMNS = {"JobsArchive": {"ScheduledAtUtc"}, "*": {"Attempts", "Logs", "Progress"}}
LATER_TABLES = {"Schedules", "Workers", "CircuitBreakers", "JobSteps", "EventFeed"}
LATER_INDEXES = {"IX_JobsDLQ_ZombieWorker", "IX_JobsDLQ_Reason"}
OLD_COLLATION = "SQL_Latin1_General_CP1_CI_AS"

# (unique, keys, filter, included columns, options): what sys.indexes and sys.index_columns hold.
Definition = tuple[bool, str, str, frozenset[str], frozenset[str]]
_CREATE = re.compile(
    r"^CREATE (UNIQUE )?INDEX \[(\w+)\] ON chokaq\.\[(\w+)\] \((.*?)\)"
    r"(?: INCLUDE \((.*?)\))?(?: WHERE (.*?))?(?: WITH \((.*)\))?$"
)
_DROP = re.compile(r"^DROP INDEX (?:IF EXISTS )?\[(\w+)\] ON chokaq\.\[(\w+)\]")
_SET = re.compile(r"^ALTER INDEX \[(\w+)\] ON chokaq\.\[(\w+)\] SET \((.*)\)$")
_ADD = re.compile(r"COL_LENGTH\('chokaq\.(\w+)', '(\w+)'\) IS NULL ALTER TABLE")
_TABLE = re.compile(r"^\s*CREATE TABLE chokaq\.\[(\w+)\]")
_NAME = re.compile(r"\[(\w+)\]")


def parse(create: str) -> tuple[str, str, Definition]:
    m = _CREATE.match(create.strip())
    assert m, create
    unique, name, table, keys, include, where, options = m.groups()
    option_set = frozenset(o.strip() for o in (options or "").split(",") if o.strip())
    return table, name, (bool(unique), keys, where or "", frozenset(_NAME.findall(include or "")), option_set)


def fresh(dialect: Any) -> dict[str, dict[str, Definition]]:
    """Every table's indexes as a new database gets them from the current definitions."""
    out: dict[str, dict[str, Definition]] = {t.name: {} for t in metadata.sorted_tables}
    for table in metadata.sorted_tables:
        for index in table.indexes:
            t, name, definition = parse(str(CreateIndex(index).compile(dialect=dialect)))
            out[t][name] = definition
    return out


class Version2:
    """The catalogue of a version-2 database, after the statements recorded so far."""

    def __init__(self, recorder: Recorder, dialect: Any) -> None:
        self.recorder, self.dialect = recorder, dialect
        self.columns: dict[str, set[str]] = {}
        self.indexes: dict[str, dict[str, Definition]] = {}
        self.refused: list[str] = []  # what SQL Server would have answered with an error

    def replay(self) -> Version2:
        self.refused = []
        self.columns = {
            t.name: {c.name for c in t.columns} - LATER_COLUMNS.get(t.name, set()) - LATER_COLUMNS["*"]
            for t in metadata.sorted_tables
            if t.name not in LATER_TABLES
        }
        self.indexes = {
            t: {
                n: (u, k, w, frozenset(), frozenset()) for n, (u, k, w, _, _) in found.items() if n not in LATER_INDEXES
            }
            for t, found in fresh(self.dialect).items()
            if t in self.columns
        }
        for call in self.recorder.statements:
            self._apply(call.sql.strip())
        return self

    def _apply(self, sql: str) -> None:
        if m := _TABLE.match(sql):
            self.columns[m[1]] = {c.name for c in metadata.tables[f"chokaq.{m[1]}"].columns}
            self.indexes[m[1]] = {}
        elif m := _ADD.search(sql):
            self.columns[m[1]].add(m[2])
        elif m := _DROP.match(sql):
            self.indexes[m[2]].pop(m[1], None)
        elif m := _SET.match(sql):
            if m[1] in self.indexes[m[2]]:
                u, k, w, inc, opts = self.indexes[m[2]][m[1]]
                self.indexes[m[2]][m[1]] = (u, k, w, inc, opts | {m[3]})
        elif sql.startswith(("CREATE INDEX", "CREATE UNIQUE INDEX")):
            self._create(sql)

    def _create(self, sql: str) -> None:
        table, name, (u, keys, where, include, options) = parse(sql)
        rebuild = "DROP_EXISTING = ON" in options
        missing = set(_NAME.findall(keys + " " + where)) | include
        missing -= self.columns.get(table, set())
        if missing:
            self.refused.append(f"Msg 1911: {sorted(missing)} not in {table}: {sql}")
        if rebuild != (name in self.indexes.get(table, {})):
            self.refused.append(f"Msg {'7999' if rebuild else '1913'}: {sql}")
        self.indexes.setdefault(table, {})[name] = (u, keys, where, include, options - {"DROP_EXISTING = ON"})

    # ------------------------------------------------------------------ catalogue answers
    def _table(self, call: Call) -> str:
        return str(call.params[0][0]).removeprefix("chokaq.")

    def sys_columns(self, call: Call) -> Rows:
        """sys.columns (migration 3's plan): the keys still in the old collation."""
        table = metadata.tables[f"chokaq.{self._table(call)}"]
        present = self.replay().columns.get(table.name, set())
        rows: Rows = []
        for column in table.columns:
            if column.name in present:
                wanted = _wanted(column, self.dialect)
                rows.append((column.name, "int", None) if wanted is None else (column.name, "varchar", OLD_COLLATION))
        return rows

    def primary_key(self, call: Call) -> Rows:
        """sys.key_constraints: the key, without the sequential option."""
        return [(f"PK_{self._table(call)}", False)]

    def index_names(self, call: Call) -> Rows:
        return [(name,) for name in self.replay().indexes.get(self._table(call), {})]

    def index_options(self, call: Call) -> Rows:
        """Migration 13's catalogue: name, sequential option, one included column per row."""
        out: Rows = []
        for name, (_, _, _, include, options) in self.replay().indexes.get(self._table(call), {}).items():
            sequential = "OPTIMIZE_FOR_SEQUENTIAL_KEY = ON" in options
            out.extend([(name, sequential, column) for column in sorted(include)] or [(name, sequential, None)])
        return out

    def has_table(self, call: Call) -> Rows:
        """INFORMATION_SCHEMA.TABLES (``create(checkfirst=True)``, and before an index's reflection)."""
        return [(p,) for p in call.params[0] if p in self.replay().columns]

    def reflected(self, call: Call) -> Rows:
        """SQLAlchemy's index reflection (``Index.create(checkfirst=True)`` asks it by table name)."""
        found = self.replay().indexes.get(str(call.params[0][0]), {})
        return [(n, definition[0], name, 2, None) for n, (name, definition) in enumerate(found.items(), 1)]

    def script(self) -> None:
        """Answer the catalogue queries migrations 3 and 13 ask, from this model."""
        rec = self.recorder
        rec.answer(r"INFORMATION_SCHEMA\]\.\[TABLES\]", self.has_table, ["TABLE_NAME"], once=False)
        rec.answer(
            r"FROM sys\.columns AS c JOIN sys\.types", self.sys_columns, ["name", "type", "collation"], once=False
        )
        rec.answer(r"FROM sys\.key_constraints", self.primary_key, ["name", "seq"], once=False)
        rec.answer(r"^SELECT i\.name FROM sys\.indexes AS i WHERE", self.index_names, ["name"], once=False)
        rec.answer(r"ic\.\[is_included_column\]", self.index_options, ["name", "seq", "included"], once=False)
        columns = ["index_id", "is_unique", "name", "type", "filter_definition"]
        rec.answer(r"from\s+sys\.indexes as ind\b", self.reflected, columns, once=False)
