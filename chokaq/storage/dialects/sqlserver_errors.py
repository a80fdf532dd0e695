"""SQL Server's errors as pyodbc raises them: which are worth a replay, and a missing ODBC driver
named as a configuration error instead of a dropped link."""

from __future__ import annotations

import re
from typing import Any

# SQL Server / Azure SQL error numbers worth replaying: deadlock victim (1205), lock resources
# (1204) and lock timeout (1222, from Storage.CommandTimeout), database not reachable or in
# failover (4060, 4221, 40143, 40197, 40540, 40613, 42108, 42109, 49918-49920), throttling
# (10928, 10929, 40501), dropped links (233, 10053, 10054, 10060) and the driver's timeout (-2).
MSSQL_TRANSIENT = {
    -2, 233, 1204, 1205, 1222, 4060, 4221, 10053, 10054, 10060, 10928, 10929,
    40143, 40197, 40501, 40540, 40613, 42108, 42109, 49918, 49919, 49920,
}  # fmt: skip
MSSQL_TRANSIENT_SQLSTATES = {"HYT00", "HYT01", "08S01", "08001", "40001"}
# pyodbc formats a diagnostic record as "[SQLSTATE] <text> (<native number>) (<ODBC function>)"
# (later records, on Windows: "; [SQLSTATE] <text> (<number>)"). The number the driver placed is
# the one just before the function name; any "(digits)" inside <text> (a duplicate key value, an
# object name) is the server's prose and must not be read as an error number.
_PYODBC_NATIVE = re.compile(r" \((-?\d+)\) \((SQL\w+)\)")
_PYODBC_NATIVE_AT_END = re.compile(r"\((-?\d+)\)\s*\Z")
_MISSING_DRIVER = re.compile(r"Can't open lib '([^']*)'")


def _pyodbc_args(exc: BaseException) -> tuple[str, str] | None:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    if not type(exc).__module__.startswith("pyodbc") or len(args) < 2:
        return None
    if not isinstance(args[0], str) or not isinstance(args[1], str):
        return None
    return args[0], args[1]


def mssql_native_error(exc: BaseException) -> int | None:
    """The native error number pyodbc placed in its message, or None."""
    parsed = _pyodbc_args(exc)
    if parsed is None:
        return None
    message = parsed[1]
    # The last "(n) (SQLFunction)" is the first record's own: <text> comes before it, and later
    # records carry no function name.
    placed = list(_PYODBC_NATIVE.finditer(message))
    if placed:
        return int(placed[-1].group(1))
    at_end = _PYODBC_NATIVE_AT_END.search(message)
    return int(at_end.group(1)) if at_end else None


def missing_odbc_driver(exc: BaseException) -> str | None:
    """A one-line explanation when pyodbc could not load the ODBC driver, naming what to install."""
    parsed = _pyodbc_args(exc)
    if parsed is None:
        return None
    sqlstate, message = parsed
    lib = _MISSING_DRIVER.search(message)
    if lib is None and not (sqlstate == "IM002" or "Data source name not found" in message):
        return None
    what = f"the ODBC driver {lib.group(1)!r} cannot be loaded" if lib else "no ODBC driver is named or installed"
    return (
        f"{what}: install Microsoft's ODBC Driver 18 (Debian/Ubuntu package msodbcsql18, "
        "driver=ODBC+Driver+18+for+SQL+Server) or FreeTDS (package tdsodbc, driver=FreeTDS) "
        "and name it in the storage URL's driver= option"
    )


def transient(exc: BaseException) -> bool:
    """Whether a (pyodbc or pyodbc-shaped) error is one SQL Server lets pass on a replay."""
    name = type(exc).__name__
    if not (type(exc).__module__.startswith("pyodbc") or name in {"OperationalError", "ProgrammingError", "Error"}):
        return False
    args = getattr(exc, "args", ())
    if args and isinstance(args[0], str) and args[0] in MSSQL_TRANSIENT_SQLSTATES:
        return True
    number = mssql_native_error(exc)
    return number is not None and number in MSSQL_TRANSIENT
