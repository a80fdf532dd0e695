"""A recording stand-in for pyodbc's connection and cursor: what SQL Server would be sent.

There is no SQL Server here. SQLAlchemy's real mssql+pyodbc dialect runs on top of these objects
(``pyodbc.connect`` is replaced by :meth:`Recorder.connect`), so every statement, parameter,
``setinputsizes`` call, ``fast_executemany`` flag and autocommit switch that production would hand
to the ODBC driver is recorded. Results are canned: the dialect's start-up queries are answered as
SQL Server 2022 answers them, and a test scripts the rows its statements need.

``describes`` models two pyodbc rules (pyodbc's params.cpp, and its wiki on fast_executemany): a
parameter that is ``None`` costs an ``SQLDescribeParam`` whatever ``setinputsizes`` said (pyodbc
asks for a NULL's type in GetNullInfo, before the given types are applied), and so does *every*
untyped parameter of a ``fast_executemany`` call. msodbcsql answers that with
``sp_describe_undeclared_parameters``: an extra server round trip, and when the description fails
pyodbc binds VARCHAR(255). chokaq therefore writes NULL into the statement text instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

SQL_SERVER_2022 = "16.0.4135.4"

Rows = list[tuple[Any, ...]]


@dataclass
class Call:
    """One thing handed to the driver."""

    kind: str  # "connect" | "execute" | "executemany" | "commit" | "rollback" | "autocommit"
    sql: str = ""
    params: list[tuple[Any, ...]] = field(default_factory=list)  # one tuple per parameter set
    inputsizes: list[Any] | None = None  # what setinputsizes said before this call
    fast_executemany: bool = False
    value: Any = None  # autocommit's new value; connect's connection string

    @property
    def describes(self) -> int:
        """Parameters pyodbc would have to describe with a server round trip (see module doc)."""
        if self.kind not in ("execute", "executemany"):
            return 0
        sizes = self.inputsizes or []

        def typed(i: int) -> bool:
            # pyodbc takes an integer SQL type; anything else (SQLAlchemy passes float for
            # NUMBER) leaves the parameter typed by its Python value.
            return i < len(sizes) and sizes[i] is not None and isinstance(sizes[i][0], int)

        n = 0
        for i in range(len(self.params[0]) if self.params else 0):
            # A NULL is described even when typed; fast_executemany describes every untyped one.
            null = any(p[i] is None for p in self.params)
            if null or (not typed(i) and self.kind == "executemany" and self.fast_executemany):
                n += 1
        return n

    @property
    def nulls(self) -> list[int]:
        """Positions of parameters bound as None in any row (each costs a describe, see above)."""
        width = len(self.params[0]) if self.params else 0
        return [i for i in range(width) if any(p[i] is None for p in self.params)]

    @property
    def param_count(self) -> int:
        return len(self.params[0]) if self.params else 0


# Rows computed when the statement arrives, from its call (its parameters, what was sent before).
Reply = Callable[[Call], Rows]


@dataclass
class Answer:
    match: str  # a regular expression searched in the SQL text
    rows: Rows | Reply
    columns: Sequence[str]
    rowcount: int | None
    once: bool


class Recorder:
    """Records every call; answers statements with scripted rows."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.answers: list[Answer] = []
        self.connections: list[RecordingConnection] = []

    # ----------------------------------------------------------------- scripting
    def answer(
        self,
        match: str,
        rows: Rows | Reply | None = None,
        columns: Sequence[str] = ("c0",),
        *,
        rowcount: int | None = None,
        once: bool = True,
    ) -> None:
        """Answer the next statement whose SQL matches ``match`` (the first such script wins)."""
        self.answers.append(Answer(match, rows if callable(rows) else list(rows or []), columns, rowcount, once))

    def clear(self) -> None:
        self.calls.clear()

    # ----------------------------------------------------------------- reading the record
    @property
    def statements(self) -> list[Call]:
        return [c for c in self.calls if c.kind in ("execute", "executemany")]

    def round_trips(self) -> list[Call]:
        """Calls that reach the server: statements, commits and rollbacks outside autocommit."""
        # pyodbc's commit and rollback are no-ops in autocommit mode (nothing is open).
        ends = [c for c in self.calls if c.kind in ("commit", "rollback") and c.value is not True]
        return [c for c in self.calls if c.kind in ("execute", "executemany") or c in ends]

    # ----------------------------------------------------------------- the DBAPI side
    def connect(self, connection_string: str = "", **kwargs: Any) -> RecordingConnection:
        self.calls.append(Call("connect", value=(connection_string, kwargs)))
        conn = RecordingConnection(self)
        self.connections.append(conn)
        return conn

    def respond(self, sql: str) -> tuple[Rows, Sequence[str] | None, int]:
        for a in self.answers:
            if re.search(a.match, sql):
                if a.once:
                    self.answers.remove(a)
                rows = a.rows(self.calls[-1]) if callable(a.rows) else list(a.rows)
                rowcount = a.rowcount if a.rowcount is not None else len(rows)
                return rows, a.columns, rowcount
        for pattern, value in _STARTUP:
            if pattern in sql:
                return [(value,)], ("c0",), 1
        if re.match(r"\s*(SELECT|WITH)\b", sql, re.I) or re.search(r"\bOUTPUT\b", sql):
            return [], ("c0",), 0
        return [], None, 0


# What SQLAlchemy's mssql dialect asks while it initialises, answered as SQL Server 2022 does.
_STARTUP: list[tuple[str, Any]] = [
    ("SERVERPROPERTY('ProductVersion')", SQL_SERVER_2022),
    ("schema_name()", "dbo"),
    ("sys.system_views", "dm_exec_sessions"),
    ("transaction_isolation_level", "READ COMMITTED"),
    ("test max support", "test max support"),
    ("db_name()", "chokaq"),
]


class RecordingConnection:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self._autocommit = False
        self.timeout = 0
        self.closed = False

    @property
    def autocommit(self) -> bool:
        return self._autocommit

    @autocommit.setter
    def autocommit(self, value: bool) -> None:
        # pyodbc sets SQL_ATTR_AUTOCOMMIT; switching it on commits an open transaction.
        self.recorder.calls.append(Call("autocommit", value=bool(value)))
        self._autocommit = bool(value)

    def cursor(self) -> RecordingCursor:
        return RecordingCursor(self)

    def commit(self) -> None:
        self.recorder.calls.append(Call("commit", value=self._autocommit))

    def rollback(self) -> None:
        self.recorder.calls.append(Call("rollback", value=self._autocommit))

    def close(self) -> None:
        self.closed = True

    def getinfo(self, _what: int) -> str:
        return SQL_SERVER_2022

    def add_output_converter(self, _sqltype: int, _func: Callable[[Any], Any]) -> None:
        pass

    def setdecoding(self, *_a: Any, **_k: Any) -> None:
        pass

    def setencoding(self, *_a: Any, **_k: Any) -> None:
        pass


class RecordingCursor:
    def __init__(self, conn: RecordingConnection) -> None:
        self.connection = conn
        self.fast_executemany = False
        self._sizes: list[Any] | None = None
        self._rows: Rows = []
        self.description: list[tuple[Any, ...]] | None = None
        self.rowcount = -1

    def setinputsizes(self, sizes: Sequence[Any] | None) -> None:
        if sizes is None:
            self._sizes = None
            return
        self._sizes = [s if isinstance(s, tuple) or s is None else (s, None, None) for s in sizes]

    def _run(self, kind: str, sql: str, params: list[tuple[Any, ...]]) -> None:
        rec = self.connection.recorder
        rec.calls.append(
            Call(kind, sql, params, None if self._sizes is None else list(self._sizes), self.fast_executemany)
        )
        rows, columns, rowcount = rec.respond(sql)
        self._rows = rows
        self.description = None if columns is None else [(c, None, None, None, None, None, True) for c in columns]
        self.rowcount = rowcount

    def execute(self, sql: str, *params: Any) -> RecordingCursor:
        if len(params) == 1 and isinstance(params[0], (list, tuple)):
            params = tuple(params[0])
        self._run("execute", sql, [tuple(params)])
        return self

    def executemany(self, sql: str, seq: Sequence[Sequence[Any]]) -> None:
        self._run("executemany", sql, [tuple(p) for p in seq])

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows.pop(0) if self._rows else None

    def fetchmany(self, size: int = 1) -> Rows:
        out, self._rows = self._rows[:size], self._rows[size:]
        return out

    def fetchall(self) -> Rows:
        out, self._rows = self._rows, []
        return out

    def nextset(self) -> bool:
        return False

    def close(self) -> None:
        pass


def sql_server_2022_engine(recorder: Recorder | None = None, **kwargs: Any) -> Any:
    """An mssql+pyodbc engine on a recorder, its dialect initialised as for SQL Server 2022
    (``server_version_info`` (16, ...): OFFSET/FETCH paging, NVARCHAR(max), ...)."""
    from sqlalchemy import create_engine

    engine = create_engine("mssql+pyodbc://", creator=(recorder or Recorder()).connect, **kwargs)
    with engine.connect():
        pass
    assert engine.dialect.server_version_info[0] == 16
    return engine
