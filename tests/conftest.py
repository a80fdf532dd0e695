"""Shared fixtures: real SQLite files and the real PostgreSQL server.

PostgreSQL tests skip (saying why) when the server is unreachable, unless
CHOKAQ_REQUIRE_POSTGRES=1, which CI sets: then they fail instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from chokaq.settings import StorageSettings
from chokaq.storage import Storage

PG_ADMIN_URL = os.environ.get("CHOKAQ_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REQUIRE_PG = os.environ.get("CHOKAQ_REQUIRE_POSTGRES") == "1"
MSSQL_URL = os.environ.get("CHOKAQ_TEST_MSSQL_URL")

_pg_ok: bool | None = None
_pg_error = ""


def pg_available() -> bool:
    global _pg_ok, _pg_error
    if _pg_ok is None:
        try:
            eng = create_engine(PG_ADMIN_URL)
            with eng.connect() as c:
                c.execute(text("select 1"))
            eng.dispose()
            _pg_ok = True
        except Exception as exc:  # pragma: no cover - depends on the machine
            _pg_ok, _pg_error = False, str(exc).splitlines()[0]
    return _pg_ok


def require_pg() -> None:
    if pg_available():
        return
    msg = f"PostgreSQL not reachable at {PG_ADMIN_URL}: {_pg_error}"
    if REQUIRE_PG:
        pytest.fail(msg + " (CHOKAQ_REQUIRE_POSTGRES=1)")
    pytest.skip(msg + "; set CHOKAQ_TEST_PG_URL or start PostgreSQL")


def fresh_pg_database() -> str:
    """A new, empty database per test: tests stay independent and can run concurrently."""
    require_pg()
    name = f"chokaq_t_{uuid.uuid4().hex[:12]}"
    eng = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with eng.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    eng.dispose()
    return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name


def drop_pg_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    eng = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with eng.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    eng.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'chokaq.db'}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    url = fresh_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Run the test once on a SQLite file and once on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'chokaq.db'}"
        return
    url = fresh_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture
def storage(db_url: str) -> Iterator[Storage]:
    s = Storage(db_url, settings=StorageSettings(transient_retries=2))
    s.upgrade()
    try:
        yield s
    finally:
        s.close()
