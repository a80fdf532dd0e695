"""SQL Server connection set-up, checked at the DBAPI boundary: what reaches ``pyodbc.connect``
(connection string, ``attrs_before``, login timeout), what runs once per new connection, and a
missing ODBC driver (a real unixODBC driver manager answers that one)."""

from __future__ import annotations

import struct
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from chokaq.domain.errors import ConfigurationError
from chokaq.settings import StorageSettings
from chokaq.storage import Storage
from chokaq.storage.dialects.sqlserver_connect import SQL_COPT_SS_ACCESS_TOKEN
from chokaq.storage.engine import build_engine

from .mssql_fake import FakeServer

pyodbc = pytest.importorskip("pyodbc", reason="pyodbc needs libodbc (Debian: unixodbc)")

ROOT = Path(__file__).resolve().parents[2]
DRIVER = "driver=ODBC+Driver+18+for+SQL+Server"


class TokenCredential:
    """Stands in for azure-identity's DefaultAzureCredential (no Azure here)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.scopes: list[str] = []

    def get_token(self, *scopes: str) -> Any:
        self.scopes.extend(scopes)

        class Token:
            token = "eyJ0eXAi.test-token"

        return Token()


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    srv = FakeServer()
    monkeypatch.setattr(pyodbc, "connect", srv.connect)
    return srv


@pytest.fixture
def credential(monkeypatch: pytest.MonkeyPatch) -> type[TokenCredential]:
    import azure.identity

    monkeypatch.setattr(azure.identity, "DefaultAzureCredential", TokenCredential)
    return TokenCredential


def _token_struct(token: str) -> bytes:
    raw = token.encode("utf-16-le")
    return struct.pack(f"<I{len(raw)}s", len(raw), raw)


@pytest.mark.parametrize(
    "url",
    [
        # No user: SQLAlchemy adds Trusted_Connection=Yes.
        f"mssql+pyodbc://@srv.database.windows.net/chokaq?{DRIVER}&Encrypt=yes&authentication=azure_identity",
        # A user and password left in the URL.
        f"mssql+pyodbc://someone:s3cret@srv.database.windows.net/chokaq?{DRIVER}&Encrypt=yes&authentication=ActiveDirectoryToken",
    ],
)
def test_token_sign_in_hands_the_driver_only_the_token(
    server: FakeServer, credential: type[TokenCredential], url: str
) -> None:
    engine = build_engine(url)
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))
    (call,) = server.calls
    assert call.connection_string == (
        "DRIVER={ODBC Driver 18 for SQL Server};Server=srv.database.windows.net;Database=chokaq;Encrypt=yes"
    )
    assert call.kwargs["attrs_before"] == {SQL_COPT_SS_ACCESS_TOKEN: _token_struct("eyJ0eXAi.test-token")}
    engine.dispose()


def test_password_sign_in_is_left_alone(server: FakeServer) -> None:
    engine = build_engine(f"mssql+pyodbc://sa:Pw_1@127.0.0.1:1433/chokaq?{DRIVER}&TrustServerCertificate=yes")
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))
    (call,) = server.calls
    assert call.connection_string.endswith(";UID=sa;PWD=Pw_1;TrustServerCertificate=yes"), call.connection_string
    assert "attrs_before" not in call.kwargs
    engine.dispose()


def test_connection_string_keys_with_braced_values() -> None:
    from chokaq.storage.dialects.sqlserver_connect import odbc_pairs, without_sign_in_keys

    cs = (
        "DRIVER={ODBC Driver 18 for SQL Server};Server=s;PWD={a;b}}c};Trusted_Connection=Yes;"
        "authentication=x;Encrypt=yes"
    )
    assert odbc_pairs(cs)[2] == ("PWD", "{a;b}}c}")
    assert without_sign_in_keys(cs) == "DRIVER={ODBC Driver 18 for SQL Server};Server=s;Encrypt=yes"


def test_command_timeout_is_set_once_per_connection(server: FakeServer) -> None:
    server.answer(r"SYSUTCDATETIME", [(datetime(2026, 1, 1),)])
    storage = Storage(
        f"mssql+pyodbc://sa:Pw_1@db/chokaq?{DRIVER}",
        settings=StorageSettings(command_timeout=7, pool_size=1),
    )
    for _ in range(3):
        storage.ping()
    (call,) = server.calls
    assert call.kwargs["timeout"] == 7  # the login timeout
    (conn,) = server.connections
    assert conn.timeout == 7  # the query timeout, on the connection
    # One SET for the connection's life, not one per transaction.
    assert conn.statements.count("SET LOCK_TIMEOUT 7000") == 1
    assert sum("SYSUTCDATETIME()" in s for s in conn.statements) == 3
    storage.close()


def test_no_command_timeout_sends_no_set(server: FakeServer) -> None:
    server.answer(r"SYSUTCDATETIME", [(datetime(2026, 1, 1),)])
    storage = Storage(f"mssql+pyodbc://sa:Pw_1@db/chokaq?{DRIVER}", settings=StorageSettings(command_timeout=0))
    storage.ping()
    assert "timeout" not in server.calls[0].kwargs
    assert not any("LOCK_TIMEOUT" in s for s in server.sql())
    storage.close()


MISSING_DRIVER_URL = "mssql+pyodbc://sa:Pw_secret_9@127.0.0.1:1/chokaq?driver=No+Such+ODBC+Driver"


def test_a_missing_odbc_driver_fails_at_once_naming_the_package() -> None:
    # The real unixODBC driver manager: the driver is not registered, so it cannot be loaded.
    storage = Storage(MISSING_DRIVER_URL, settings=StorageSettings(transient_retries=5))
    attempts: list[str] = []
    storage.fault_injector = attempts.append
    with pytest.raises(ConfigurationError) as err:
        storage.ping()
    assert attempts == ["ping"], "a missing driver must not be replayed"
    message = str(err.value)
    assert "No Such ODBC Driver" in message and "msodbcsql18" in message and "tdsodbc" in message
    assert "Pw_secret_9" not in message
    storage.close()


def test_the_pooled_enqueue_names_a_missing_odbc_driver_as_the_engine_does() -> None:
    # An enqueue to a queue this process knows checks a connection out of the pool itself,
    # outside the engine's handle_error hook that names the missing driver.
    from chokaq.domain.models import EnqueueRequest

    storage = Storage(MISSING_DRIVER_URL, settings=StorageSettings(transient_retries=5))
    attempts: list[str] = []
    storage.fault_injector = attempts.append
    storage.queue_cache.confirm(["default"])  # as after the queue's first job
    with pytest.raises(ConfigurationError) as err:
        storage.enqueue(EnqueueRequest(type="t", payload="{}"))
    assert len(attempts) == 1, f"a missing driver must not be replayed: {attempts}"
    message = str(err.value)
    assert "No Such ODBC Driver" in message and "msodbcsql18" in message
    assert "Pw_secret_9" not in message
    storage.close()


def test_cli_names_the_missing_driver_in_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "chokaq.cli.main", "--db", MISSING_DRIVER_URL, "db", "upgrade"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and "msodbcsql18" in lines[0]
    assert "Pw_secret_9" not in proc.stderr
