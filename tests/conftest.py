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
from tests.profiles import LIVE, MSSQL_URL

PG_ADMIN_URL = os.environ.get("CHOKAQ_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REQUIRE_PG = os.environ.get("CHOKAQ_REQUIRE_POSTGRES") == "1"

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


def fresh_mssql() -> str:
    """The live SQL Server suite (CHOKAQ_TEST_MSSQL_URL): chokaq's tables dropped before each test."""
    assert MSSQL_URL
    eng = create_engine(MSSQL_URL, isolation_level="AUTOCOMMIT")
    with eng.connect() as c:
        for table in ("AuditLog", "JobsHot", "JobsArchive", "JobsDLQ", "Queues", "StatsSummary", "SchemaMigrations"):
            c.execute(text(f"DROP TABLE IF EXISTS [chokaq].[{table}]"))
    eng.dispose()
    return MSSQL_URL


@pytest.fixture(params=LIVE)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Run the test once per live profile of tests/profiles.py, named after it: a SQLite file, a
    fresh PostgreSQL database and, when CHOKAQ_TEST_MSSQL_URL is set, a live SQL Server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'chokaq.db'}"
        return
    if request.param == "mssql":
        yield fresh_mssql()
        return
    assert request.param == "postgres", f"no database is made for the profile {request.param!r}"
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


# One in-memory OpenTelemetry pipeline for the whole run: the global providers can be set once.
_metric_reader = None
_span_exporter = None


def otel_memory() -> tuple[object, object]:
    global _metric_reader, _span_exporter
    if _metric_reader is None:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        _metric_reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[_metric_reader]))
        _span_exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_span_exporter))
        trace.set_tracer_provider(provider)
    return _metric_reader, _span_exporter


def metric_total(name: str, **attrs: object) -> float:
    """Sum of a counter's data points (matching ``attrs``) recorded so far in this process."""
    reader, _ = otel_memory()
    data = reader.get_metrics_data()  # type: ignore[attr-defined]
    total = 0.0
    if data is None:
        return total
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name != name:
                    continue
                for point in metric.data.data_points:
                    if all(point.attributes.get(k) == v for k, v in attrs.items()):
                        total += getattr(point, "value", 0) or getattr(point, "count", 0)
    return total


# The loopback fault proxy as a fixture for every test module (tests/faultproxy.py).
from tests.faultproxy import fault_proxy  # noqa: E402, F401
