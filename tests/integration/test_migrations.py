"""The schema: concurrent bootstraps are safe, and the DBA scripts create what the code creates."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, inspect, text

from chokaq.storage import Storage
from chokaq.storage.migrations import MIGRATIONS, current_version
from tests.conftest import drop_pg_database, fresh_pg_database

VERSIONS = [v for v, _, _ in MIGRATIONS]

ROOT = Path(__file__).resolve().parents[2]


def test_concurrent_upgrades_apply_once(db_url: str) -> None:
    results: list[list[int]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def go() -> None:
        s = Storage(db_url)
        try:
            barrier.wait()
            results.append(s.upgrade())
        except BaseException as exc:
            errors.append(exc)
        finally:
            s.close()

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sorted(results) == [[], [], [], VERSIONS]
    s = Storage(db_url)
    assert current_version(s.engine) == VERSIONS[-1]


def test_upgrade_from_version_1_drops_the_worker_index(db_url: str) -> None:
    s = Storage(db_url)
    s.upgrade()
    schema = None if s.dialect == "sqlite" else "chokaq"
    table = '"JobsHot"' if s.dialect == "sqlite" else 'chokaq."JobsHot"'
    migrations = '"SchemaMigrations"' if s.dialect == "sqlite" else 'chokaq."SchemaMigrations"'
    # A database as version 1 left it.
    with s.engine.begin() as c:
        c.execute(text(f'CREATE INDEX "IX_JobsHot_Worker" ON {table} ("WorkerId", "Status")'))
        c.execute(text(f'DELETE FROM {migrations} WHERE "Version" = 2'))

    def indexes() -> set[str]:
        return {i["name"] for i in inspect(s.engine).get_indexes("JobsHot", schema=schema)}

    assert "IX_JobsHot_Worker" in indexes()
    assert s.upgrade() == [2]
    assert "IX_JobsHot_Worker" not in indexes()
    assert "IX_JobsHot_Fetch" in indexes()
    assert s.upgrade() == []
    s.close()


def describe(url: str) -> dict[str, Any]:
    eng = create_engine(url)
    insp = inspect(eng)
    out: dict[str, Any] = {}
    for table in insp.get_table_names(schema="chokaq"):
        cols = {
            c["name"]: (str(c["type"]), c["nullable"], str(c.get("default"))) for c in insp.get_columns(table, "chokaq")
        }
        idx = {
            i["name"]: (tuple(i["column_names"]), i["unique"], str(i.get("dialect_options", {})))
            for i in insp.get_indexes(table, "chokaq")
        }
        pk = tuple(insp.get_pk_constraint(table, "chokaq")["constrained_columns"])
        out[table] = (cols, idx, pk)
    with eng.connect() as c:
        out["_version"] = c.execute(text('SELECT "Version", "Name" FROM chokaq."SchemaMigrations"')).all()
    eng.dispose()
    return out


def test_upgrade_from_version_3_adds_the_archive_due_time(db_url: str) -> None:
    s = Storage(db_url)
    s.upgrade()
    schema = None if s.dialect == "sqlite" else "chokaq"
    q = (lambda t: f'"{t}"') if s.dialect == "sqlite" else (lambda t: f'chokaq."{t}"')
    # A database as version 3 left it, holding an archived job.
    with s.engine.begin() as c:
        c.execute(text(f'ALTER TABLE {q("JobsArchive")} DROP COLUMN "ScheduledAtUtc"'))
        c.execute(text(f'DELETE FROM {q("SchemaMigrations")} WHERE "Version" = 4'))
        c.execute(
            text(
                f'INSERT INTO {q("JobsArchive")} ("Id", "Queue", "Type", "Payload", "AttemptCount", "CreatedAtUtc", '
                '"FinishedAtUtc") VALUES '
                "('old', 'default', 't', '{}', 1, '2026-01-01 00:00:00', '2026-01-01 00:00:01')"
            )
        )

    def columns() -> set[str]:
        return {col["name"] for col in inspect(s.engine).get_columns("JobsArchive", schema=schema)}

    assert "ScheduledAtUtc" not in columns()
    assert s.upgrade() == [4]
    assert "ScheduledAtUtc" in columns()
    old = s.get_job("old")
    assert old is not None and old.scheduled_at_utc is None
    assert s.upgrade() == []
    s.close()


def test_upgrade_to_version_8_creates_the_circuit_breakers_table(db_url: str) -> None:
    s = Storage(db_url)
    s.upgrade()
    schema = None if s.dialect == "sqlite" else "chokaq"
    q = (lambda t: f'"{t}"') if s.dialect == "sqlite" else (lambda t: f'chokaq."{t}"')
    # A database as version 6 left it.
    with s.engine.begin() as c:
        c.execute(text(f"DROP TABLE {q('CircuitBreakers')}"))
        c.execute(text(f'DELETE FROM {q("SchemaMigrations")} WHERE "Version" = 8'))
    assert not inspect(s.engine).has_table("CircuitBreakers", schema=schema)
    assert s.upgrade() == [8]
    assert inspect(s.engine).has_table("CircuitBreakers", schema=schema)
    assert s.upgrade() == []
    s.close()


def test_postgres_script_creates_what_the_code_creates() -> None:
    by_code = fresh_pg_database()
    by_script = fresh_pg_database()
    try:
        Storage(by_code).upgrade()
        eng = create_engine(by_script)
        with eng.begin() as c:
            c.exec_driver_sql((ROOT / "sql/postgres/001_initial.sql").read_text())
        eng.dispose()
        code, script = describe(by_code), describe(by_script)
        assert set(code) == {
            "_version",
            "JobsHot",
            "JobsArchive",
            "JobsDLQ",
            "Queues",
            "StatsSummary",
            "SchemaMigrations",
            "AuditLog",
            "Schedules",
            "CircuitBreakers",
            "Workers",
            "JobSteps",
            "EventFeed",
        }
        assert code == script
        # And `chokaq db upgrade` on a database made by the script is a no-op.
        assert Storage(by_script).upgrade() == []
    finally:
        drop_pg_database(by_code)
        drop_pg_database(by_script)


def test_sqlite_has_the_partial_indexes(sqlite_url: str) -> None:
    Storage(sqlite_url).upgrade()
    eng = create_engine(sqlite_url)
    with eng.connect() as c:
        sql = {r[0]: r[1] for r in c.execute(text("SELECT name, sql FROM sqlite_master WHERE type='index'")).all()}
    assert 'WHERE "Status" = 0' in sql["IX_JobsHot_Fetch"]
    assert 'WHERE "Status" = 2' in sql["IX_JobsHot_ProcessingHeartbeat"]
    assert "UNIQUE" in sql["UX_JobsHot_IdempotencyKey"]
