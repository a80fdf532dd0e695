"""What chokaq needs from a SQL Server, checked by `chokaq db upgrade` before it changes anything.

- Database compatibility level 130 or higher: every claim and move reads its id lists with
  ``OPENJSON``, which lower levels do not parse.
- SQL Server 2017 (14.x) or later, or Azure SQL: completions read durations with ``JSON_VALUE``
  and a computed path, which 2016 refuses. Azure SQL Database and Managed Instance report 12.x
  as their version but run the current engine, so they are told apart by their edition.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

from chokaq.domain.errors import ConfigurationError

MIN_COMPATIBILITY_LEVEL = 130
MIN_MAJOR_VERSION = 14
RECOMMENDED_COMPATIBILITY_LEVEL = 150
# SERVERPROPERTY('EngineEdition'): 5 Azure SQL Database, 8 Azure SQL Managed Instance.
AZURE_EDITIONS = {5, 8}

_CHECK = text(
    "SELECT CAST(PARSENAME(CAST(SERVERPROPERTY('ProductVersion') AS NVARCHAR(128)), 4) AS INT), "
    "CAST(SERVERPROPERTY('EngineEdition') AS INT), "
    "(SELECT compatibility_level FROM sys.databases WHERE database_id = DB_ID()), "
    "DB_NAME()"
)


def check_sql_server(conn: Connection) -> None:
    """Raise :class:`ConfigurationError` (one line, naming the fix) when the server or database
    cannot run chokaq's statements."""
    row = conn.execute(_CHECK).one()
    major, edition, level, database = (row[0], row[1], row[2], row[3])
    azure = edition is not None and int(edition) in AZURE_EDITIONS
    if not azure and major is not None and int(major) < MIN_MAJOR_VERSION:
        raise ConfigurationError(
            f"SQL Server {int(major)}.x is too old: chokaq needs SQL Server 2017 (14.x) or later, or Azure SQL "
            "(completions use JSON_VALUE with a computed path)"
        )
    if level is not None and int(level) < MIN_COMPATIBILITY_LEVEL:
        name = str(database).replace("]", "]]")
        raise ConfigurationError(
            f"database {database!s} has compatibility level {int(level)}; chokaq needs "
            f"{MIN_COMPATIBILITY_LEVEL} or higher (OPENJSON). Fix: ALTER DATABASE [{name}] SET "
            f"COMPATIBILITY_LEVEL = {RECOMMENDED_COMPATIBILITY_LEVEL}"
        )
