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


@pytest.mark.parametrize(
    "number",
    [1205, 4060, 40197, 40501, 40613, 49918, 49919, 49920, 10928, 10929, 40143, 40540, 42108, 42109, 4221, 1204, 1222],
)
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


def test_the_number_is_the_drivers_not_digits_in_the_message_text() -> None:
    # A unique-key violation whose duplicate value happens to be a transient error number.
    exc = pyodbc.IntegrityError(
        "23000",
        "[23000] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]Violation of UNIQUE KEY constraint "
        "'UX_JobsHot_IdempotencyKey'. Cannot insert duplicate key in object 'chokaq.JobsHot'. "
        "The duplicate key value is (1205). (2627) (SQLExecDirectW)",
    )
    assert not is_transient(wrap(exc))
    text_only = pyodbc.ProgrammingError(
        "42S02",
        "[42S02] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]Invalid object name 't(40613)'. "
        "(208) (SQLExecDirectW)",
    )
    assert not is_transient(wrap(text_only))


def test_windows_style_multi_record_message_reads_the_first_records_number() -> None:
    exc = pyodbc.OperationalError(
        "40001",
        "[40001] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]Transaction (Process ID 57) was deadlocked "
        "on lock resources with another process and has been chosen as the deadlock victim. Rerun the transaction. "
        "(1205) (SQLExecDirectW); [40001] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]The statement has "
        "been terminated. (3621)",
    )
    assert is_transient(wrap(exc))
    permanent = pyodbc.IntegrityError(
        "23000",
        "[23000] [Microsoft][SQL Server]Cannot insert duplicate key (1205). (2627) (SQLExecDirectW); "
        "[01000] [Microsoft][SQL Server]The statement has been terminated. (3621)",
    )
    assert not is_transient(wrap(permanent))


def _real_connect_error(connection_string: str) -> Exception:
    try:
        pyodbc.connect(connection_string, timeout=1)
    except pyodbc.Error as exc:
        return exc
    raise AssertionError("connected?")


def test_a_missing_odbc_driver_is_not_transient() -> None:
    # Real unixODBC answers: an unregistered driver name, and no driver at all.
    cant_open = _real_connect_error("DRIVER={No Such ODBC Driver};Server=127.0.0.1,1")
    assert "Can't open lib" in str(cant_open)
    no_driver = _real_connect_error("Server=127.0.0.1,1;UID=sa;PWD=x")
    assert type(no_driver).__name__ == "InterfaceError" and no_driver.args[0] == "IM002"
    for exc in (cant_open, no_driver):
        # SQLAlchemy marks 01000 as a disconnect, so the wrapper says "invalidated".
        wrapped = OperationalError("connect", {}, exc, connection_invalidated=True)
        assert not is_transient(wrapped), exc
