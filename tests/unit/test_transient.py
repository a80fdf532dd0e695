"""Which database errors replay a transaction, with the drivers' real exception classes."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest
from sqlalchemy.exc import OperationalError

from chokaq.storage.engine import is_transient

pyodbc = pytest.importorskip("pyodbc", reason="pyodbc needs libodbc (Debian: unixodbc)")


def wrap(orig: BaseException) -> OperationalError:
    return OperationalError("SELECT 1", {}, orig)


def mssql_error(number: int, sqlstate: str = "42000", cls: type[Exception] | None = None) -> Exception:
    cls = cls or pyodbc.OperationalError
    return cls(
        sqlstate,
        f"[{sqlstate}] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]message ({number}) (SQLExecDirectW)",
    )


@pytest.mark.parametrize("number", [1205, 4060, 40197, 40501, 40613, 49918, 49919, 49920, 10928, 10929])
def test_azure_sql_transient_numbers(number: int) -> None:
    assert is_transient(wrap(mssql_error(number)))


def test_mssql_timeouts_and_link_failures() -> None:
    assert is_transient(wrap(pyodbc.OperationalError("HYT00", "[HYT00] [Microsoft]Query timeout expired (0)")))
    assert is_transient(wrap(pyodbc.OperationalError("08S01", "[08S01] Communication link failure (10054)")))


@pytest.mark.parametrize("number", [208, 2627, 547, 8152])  # missing object, PK violation, FK, truncation
def test_mssql_permanent_errors(number: int) -> None:
    assert not is_transient(wrap(mssql_error(number, cls=pyodbc.ProgrammingError)))


def test_postgres_serialization_deadlock_and_connection_errors() -> None:
    assert is_transient(wrap(psycopg.errors.SerializationFailure("could not serialize")))
    assert is_transient(wrap(psycopg.errors.DeadlockDetected("deadlock detected")))
    assert is_transient(wrap(psycopg.errors.AdminShutdown("terminating connection")))
    assert not is_transient(wrap(psycopg.errors.UniqueViolation("duplicate key")))
    assert not is_transient(wrap(psycopg.errors.UndefinedTable("no table")))


def test_sqlite_busy_is_transient() -> None:
    assert is_transient(wrap(sqlite3.OperationalError("database is locked")))
    assert not is_transient(wrap(sqlite3.OperationalError("no such table: x")))
