"""The `chokaq` command line as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

from chokaq.storage.migrations import MIGRATIONS
from tests.acceptance.conftest import ROOT, run_cli


def test_upgrade_enqueue_show_sweep(sqlite_url: str) -> None:
    up = run_cli(sqlite_url, "db", "upgrade")
    assert up.returncode == 0, up.stderr
    assert json.loads(up.stdout) == {"applied": [v for v, _, _ in MIGRATIONS], "dialect": "sqlite", "schedules": {}}
    again = run_cli(sqlite_url, "db", "upgrade")
    assert json.loads(again.stdout)["applied"] == []

    out = run_cli(
        sqlite_url,
        "enqueue",
        "report_v1",
        "--payload",
        '{"name": "q3"}',
        "--queue",
        "reports",
        "--priority",
        "30",
        "--delay",
        "60",
        "--idempotency-key",
        "r-q3",
        "--tags",
        "finance",
    )
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip()
    dup = run_cli(sqlite_url, "enqueue", "report_v1", "--payload", "{}", "--idempotency-key", "r-q3")
    assert dup.stdout.strip() == job_id

    shown = json.loads(run_cli(sqlite_url, "job", "show", job_id).stdout)
    assert shown["id"] == job_id and shown["location"] == "hot" and shown["status"] == "Pending"
    assert (shown["queue"], shown["priority"], shown["tags"], shown["payload"]) == (
        "reports",
        30,
        "finance",
        {"name": "q3"},
    )
    for key in ("attempt_count", "failure_reason", "error_details", "worker_id", "heartbeat_utc"):
        assert key in shown

    swept = run_cli(sqlite_url, "sweep")
    assert json.loads(swept.stdout) == {"recovered": 0, "archived": 0}
    # A normal command says nothing on stderr: no telemetry configured is the usual case for a CLI.
    assert [up.stderr, again.stderr, out.stderr, dup.stderr, swept.stderr] == [""] * 5


def test_payload_model_is_checked_on_enqueue(sqlite_url: str) -> None:
    run_cli(sqlite_url, "db", "upgrade")
    bad = run_cli(sqlite_url, "--app", "chokaq.demo:app", "enqueue", "email_v1", "--payload", '{"to": "x"}')
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: invalid input:") and "subject" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_bad_input_is_one_line_and_non_zero(sqlite_url: str, tmp_path: Path) -> None:
    run_cli(sqlite_url, "db", "upgrade")
    cases = [
        (("enqueue", "t", "--payload", "{nope"), "not valid JSON"),
        (("enqueue", "t", "--priority", "high"), "not a valid integer"),
        (("job", "show", "missing"), "no job 'missing'"),
        (("--db", "mysql://x/y", "health"), "unsupported database"),
        (("--db", "postgresql+psycopg://nobody@127.0.0.1:1/none", "health"), "database unavailable"),
        (("--app", "no.such.module:app", "worker"), "cannot import 'no.such.module'"),
        (("worker",), "no handlers registered"),
    ]
    for args, message in cases:
        out = run_cli(sqlite_url, *args)
        assert out.returncode != 0, args
        assert message in out.stderr, (args, out.stderr)
        assert "Traceback" not in out.stderr, args


def test_db_script_matches_the_committed_files() -> None:
    for dialect, path in (("postgresql", "sql/postgres/001_initial.sql"), ("mssql", "sql/sqlserver/001_initial.sql")):
        out = run_cli("sqlite://", "db", "script", "--dialect", dialect)
        assert out.returncode == 0
        assert out.stdout == (ROOT / path).read_text(), f"{path} is stale: run `make scripts`"
