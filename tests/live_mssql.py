"""The live SQL Server suite's set-up: `python -m tests.live_mssql prepare|url`.

`prepare` waits until SQL Server on 127.0.0.1:$MSSQL_PORT answers (it takes 10-30 s to start), then
runs sql/sqlserver/create-database.sql against master: the `chokaq` database with
READ_COMMITTED_SNAPSHOT on, as Azure SQL has it. `url` prints CHOKAQ_TEST_MSSQL_URL for that
database. `make test-mssql` and .github/workflows/mssql.yml use both.

Environment: MSSQL_SA_PASSWORD (compose's default), MSSQL_PORT (1433), MSSQL_HOST (127.0.0.1),
MSSQL_ODBC_DRIVER ("ODBC Driver 18 for SQL Server"; "FreeTDS" also works), MSSQL_WAIT_SECONDS (180).
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from urllib.parse import quote, quote_plus

ROOT = Path(__file__).resolve().parents[1]
CREATE_DATABASE = ROOT / "sql" / "sqlserver" / "create-database.sql"
DEFAULT_PASSWORD = "Chokaq_Local_Dev_2022"  # docker-compose.yml's default, a local throwaway
DATABASE = "chokaq"


def url(database: str = DATABASE, env: dict[str, str] | None = None) -> str:
    env = dict(os.environ) if env is None else env
    password = env.get("MSSQL_SA_PASSWORD", DEFAULT_PASSWORD)
    host = env.get("MSSQL_HOST", "127.0.0.1")
    port = env.get("MSSQL_PORT", "1433")
    driver = env.get("MSSQL_ODBC_DRIVER", "ODBC Driver 18 for SQL Server")
    query = f"driver={quote_plus(driver)}"
    if driver.lower() == "freetds":
        query += "&TDS_Version=7.4"  # DATETIME2 and NVARCHAR(max) need TDS 7.2 or later
    else:
        query += "&TrustServerCertificate=yes"  # the container's self-signed certificate
    return f"mssql+pyodbc://sa:{quote(password, safe='')}@{host}:{port}/{database}?{query}"


def batches(script: str) -> list[str]:
    """The script's batches, split on sqlcmd's GO lines."""
    code = "\n".join(ln for ln in script.splitlines() if not ln.lstrip().startswith("--"))
    parts = [p.strip() for p in re.split(r"^\s*GO\s*$", code, flags=re.M | re.I)]
    return [p for p in parts if p]


def prepare(wait_seconds: float) -> None:
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    from chokaq.domain.errors import ConfigurationError
    from chokaq.storage.engine import build_engine

    # chokaq's own engine: a missing ODBC driver fails at once (ConfigurationError), not after the wait.
    engine = build_engine(url("master"), pool_size=1)
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            break
        except ConfigurationError as exc:  # no ODBC driver: waiting cannot help
            raise SystemExit(f"error: {exc}") from None
        except DBAPIError as exc:  # not up yet, until the deadline
            if time.monotonic() > deadline:
                first = str(exc.orig).splitlines()[0]
                raise SystemExit(f"SQL Server did not answer within {wait_seconds:.0f} s: {first}") from None
            time.sleep(2)
    with engine.connect() as raw:
        conn = raw.execution_options(isolation_level="AUTOCOMMIT")  # CREATE/ALTER DATABASE refuse a transaction
        for batch in batches(CREATE_DATABASE.read_text()):
            conn.exec_driver_sql(batch)
        level = conn.exec_driver_sql(
            f"SELECT is_read_committed_snapshot_on FROM sys.databases WHERE name = N'{DATABASE}'"
        ).scalar()
    engine.dispose()
    if not level:
        raise SystemExit(f"database {DATABASE} has READ_COMMITTED_SNAPSHOT off")
    print(f"database {DATABASE} ready (READ_COMMITTED_SNAPSHOT ON)", file=sys.stderr)


def main(argv: list[str]) -> None:
    if argv[1:] == ["url"]:
        print(url())
    elif argv[1:] == ["prepare"]:
        prepare(float(os.environ.get("MSSQL_WAIT_SECONDS", "180")))
    else:
        raise SystemExit("usage: python -m tests.live_mssql prepare|url")


if __name__ == "__main__":
    main(sys.argv)
