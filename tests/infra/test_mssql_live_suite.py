"""The live SQL Server suite's wiring: the workflow (parsed), the Makefile targets (dry run), and
the URL and script tests/live_mssql.py use. Nothing here starts SQL Server: there is none."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from typing import Any

import pytest
import yaml
from sqlalchemy.dialects.mssql.pyodbc import MSDialect_pyodbc
from sqlalchemy.engine import make_url

from tests import live_mssql

from .conftest import COMPOSE_FILE, REPO_ROOT

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "mssql.yml"


def _workflow() -> dict[Any, Any]:
    data = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(data, dict)
    return data


def _make_dry_run(target: str, **env: str) -> list[list[str]]:
    # -o: the venv stamp counts as up to date, so the dry run shows the target's own recipe even
    # when pyproject.toml is newer than the stamp (a checkout that just edited it).
    proc = subprocess.run(
        ["make", "-n", "--no-print-directory", "-o", ".venv/.installed", target],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
        check=True,
    )
    return [shlex.split(line) for line in proc.stdout.splitlines() if line.strip() and not line.startswith("make")]


def test_workflow_runs_the_suite_against_a_sql_server_2022_service() -> None:
    wf = _workflow()
    (job,) = wf["jobs"].values()
    service = job["services"]["sqlserver"]
    assert service["image"] == "mcr.microsoft.com/mssql/server:2022-latest"
    assert service["env"]["ACCEPT_EULA"] == "Y"
    assert "1433:1433" in service["ports"]
    assert "--health-cmd" in service["options"] and "sqlcmd" in service["options"]
    # The password the service starts with is the one the suite signs in with.
    assert job["env"]["MSSQL_SA_PASSWORD"] == service["env"]["MSSQL_SA_PASSWORD"]
    assert f"-P {service['env']['MSSQL_SA_PASSWORD']}" in service["options"]
    runs = [step.get("run", "") for step in job["steps"]]
    assert any("make .venv/.installed" in r for r in runs)
    assert runs[-1].strip() == "make test-mssql-here"
    assert "workflow_dispatch" in wf[True]  # YAML 1.1 reads the key `on` as True


def test_make_targets_start_prepare_and_run_the_mssql_cases() -> None:
    full = _make_dry_run("test-mssql")
    assert full[0][:4] == ["docker", "compose", "up", "-d"] and full[0][-1] == "sqlserver"
    assert "sqlserver" in yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    here = _make_dry_run("test-mssql-here")
    assert here[0][-3:] == ["-m", "tests.live_mssql", "prepare"]
    run = here[1]
    assert run[0].startswith("CHOKAQ_TEST_MSSQL_URL=") and "tests.live_mssql url" in run[0]
    assert run[run.index("-k") + 1] == "mssql"
    files = [a for a in run if a.startswith("tests/")]
    for needed in ("tests/integration/test_storage_contract.py", "tests/integration/test_worker.py",
                   "tests/acceptance/test_crash.py", "tests/api"):  # fmt: skip
        assert needed in files
    for path in files:
        assert (REPO_ROOT / path).exists(), path


def test_suite_files_have_mssql_cases_when_the_url_is_set() -> None:
    here = _make_dry_run("test-mssql-here")
    files = [a for a in here[1] if a.startswith("tests/")]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-k", "mssql", *files],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CHOKAQ_TEST_MSSQL_URL": live_mssql.url()},
    )
    ids = [line for line in proc.stdout.splitlines() if "[mssql" in line]
    by_file = {f: sum(line.startswith(f) for line in ids) for f in files}
    assert all(n > 0 for n in by_file.values()), by_file


@pytest.mark.parametrize("driver", ["ODBC Driver 18 for SQL Server", "FreeTDS"])
def test_live_url_reaches_the_chokaq_database(driver: str) -> None:
    url = live_mssql.url(env={"MSSQL_SA_PASSWORD": "P@ss:w/rd_1", "MSSQL_ODBC_DRIVER": driver})
    parsed = make_url(url)
    assert (parsed.host, parsed.port, parsed.database, parsed.password) == ("127.0.0.1", 1433, "chokaq", "P@ss:w/rd_1")
    assert parsed.query["driver"] == driver
    args, _ = MSDialect_pyodbc().create_connect_args(parsed)
    assert f"DRIVER={{{driver}}}" in args[0] and "Database=chokaq" in args[0]
    if driver == "FreeTDS":
        assert parsed.query["TDS_Version"] == "7.4"
    else:
        assert parsed.query["TrustServerCertificate"] == "yes"


def test_create_database_script_splits_into_batches() -> None:
    batches = live_mssql.batches(live_mssql.CREATE_DATABASE.read_text())
    assert batches[0].startswith("IF DB_ID(N'chokaq') IS NULL")
    assert batches[1] == "ALTER DATABASE [chokaq] SET READ_COMMITTED_SNAPSHOT ON WITH ROLLBACK IMMEDIATE;"
    assert batches[2] == "ALTER DATABASE [chokaq] SET ALLOW_SNAPSHOT_ISOLATION ON;"
    assert len(batches) == 3


def test_the_freetds_url_reaches_the_server_port_speaking_tds() -> None:
    """The live suite's FreeTDS URL, through chokaq's engine, opens a TDS session on the given port
    (a loopback listener stands in for SQL Server and records the first packet)."""
    import socket
    import threading

    pyodbc = pytest.importorskip("pyodbc", reason="pyodbc needs libodbc (Debian: unixodbc)")
    if "FreeTDS" not in pyodbc.drivers():
        pytest.skip("FreeTDS ODBC driver not registered (Debian: tdsodbc)")
    from sqlalchemy.exc import DBAPIError

    from chokaq.storage.engine import build_engine

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    first: list[bytes] = []

    def accept() -> None:
        conn, _ = listener.accept()
        with conn:
            first.append(conn.recv(8))

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    url = live_mssql.url(env={"MSSQL_ODBC_DRIVER": "FreeTDS", "MSSQL_PORT": str(port)})
    engine = build_engine(url, command_timeout=3)
    with pytest.raises(DBAPIError):  # the listener closes after the first packet: no login
        engine.connect()
    engine.dispose()
    thread.join(10)
    listener.close()
    assert first and first[0][0] == 0x12, first  # TDS packet type 0x12: PRELOGIN
