"""A stand-in for a pyodbc connection to SQL Server, for tests at the DBAPI boundary.

There is no SQL Server here. The engine is built as in production and its ``pyodbc.connect`` is
replaced by :func:`FakeServer.connect`, so everything SQLAlchemy and chokaq hand to the driver
(connection string, ``attrs_before``, SQL text, parameters, connection attributes) is recorded.
The fake answers the queries SQLAlchemy's dialect sends on first connect, and whatever a test
scripts with :meth:`FakeServer.answer`; anything else returns no rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Call:
    connection_string: str
    kwargs: dict[str, Any]


class FakeCursor:
    def __init__(self, server: FakeServer, conn: FakeConnection) -> None:
        self.server = server
        self.conn = conn
        self.description: list[tuple[Any, ...]] | None = None
        self.rowcount = -1
        self._rows: list[tuple[Any, ...]] = []
        self.fast_executemany = False

    def execute(self, sql: str, *params: Any) -> FakeCursor:
        flat = params[0] if len(params) == 1 and isinstance(params[0], list | tuple) else params
        self.server.statements.append((sql, tuple(flat)))
        self.conn.statements.append(sql)
        self.conn.timeouts.append(self.conn.timeout)  # the query timeout this statement ran under
        rows = self.server.rows_for(sql)
        if rows is None and sql.lstrip().upper().startswith(("SELECT", "WITH")):
            rows = []
        if rows is None:
            self.description, self._rows = None, []
        else:
            width = len(rows[0]) if rows else 1
            self.description = [(f"c{i}", str, None, None, None, None, True) for i in range(width)]
            self._rows = list(rows)
        self.rowcount = len(self._rows)
        return self

    def setinputsizes(self, sizes: Any) -> None:
        self.server.input_sizes.append(list(sizes))

    def executemany(self, sql: str, seq: Any) -> None:
        for params in seq:
            self.execute(sql, params)

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows.pop(0) if self._rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows, self._rows = self._rows, []
        return rows

    def fetchmany(self, n: int = 1) -> list[tuple[Any, ...]]:
        rows, self._rows = self._rows[:n], self._rows[n:]
        return rows

    def nextset(self) -> bool:
        return False

    def close(self) -> None:
        pass


class FakeConnection:
    def __init__(self, server: FakeServer) -> None:
        self.server = server
        self.statements: list[str] = []
        self.timeouts: list[int] = []
        self.timeout = 0
        self.autocommit = False
        self.closed = False

    def cursor(self) -> FakeCursor:
        return FakeCursor(self.server, self)

    def getinfo(self, what: int) -> Any:
        return "16.00.1000"

    def commit(self) -> None:
        self.server.statements.append(("COMMIT", ()))

    def rollback(self) -> None:
        self.server.statements.append(("ROLLBACK", ()))

    def close(self) -> None:
        self.closed = True

    def add_output_converter(self, *args: Any) -> None:
        pass

    def setdecoding(self, *args: Any, **kwargs: Any) -> None:
        pass


@dataclass
class FakeServer:
    """SQL Server 2022 by default; ``answer`` scripts rows for statements matching a pattern."""

    calls: list[Call] = field(default_factory=list)
    statements: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    connections: list[FakeConnection] = field(default_factory=list)
    rules: list[tuple[re.Pattern[str], list[tuple[Any, ...]]]] = field(default_factory=list)
    input_sizes: list[list[Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # What SQLAlchemy's mssql dialect asks on first connect.
        self.answer(r"SERVERPROPERTY\('ProductVersion'\)", [("16.0.4135.4",)])
        self.answer(r"schema_name\(\)", [("dbo",)])
        self.answer(r"CAST\('test max support'", [("test max support",)])
        self.answer(r"sys\.system_views", [("dm_exec_sessions",)])
        self.answer(r"transaction_isolation_level", [("READ COMMITTED",)])

    def answer(self, pattern: str, rows: list[tuple[Any, ...]]) -> None:
        """The newest rule wins, so a test can override the defaults."""
        self.rules.insert(0, (re.compile(pattern, re.S | re.I), rows))

    def rows_for(self, sql: str) -> list[tuple[Any, ...]] | None:
        for pattern, rows in self.rules:
            if pattern.search(sql):
                return rows
        return None

    def connect(self, connection_string: str, **kwargs: Any) -> FakeConnection:
        self.calls.append(Call(connection_string, dict(kwargs)))
        conn = FakeConnection(self)
        self.connections.append(conn)
        return conn

    def sql(self) -> list[str]:
        return [s for s, _ in self.statements]
