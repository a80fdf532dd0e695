"""The operator CLI: chokaq dlq list/show/resurrect/purge, chokaq archive purge, chokaq serve."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner

import chokaq.cli.admin_cmds as admin_cmds
from chokaq import ChokaQ, FailureReason
from chokaq.cli.main import cli
from chokaq.domain.states import Location
from tests.api.helpers import failed_total, make_archived, make_dead


def run(url: str, *args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(cli, ["--db", url, *args], input=input, catch_exceptions=False)


def test_dlq_list_and_show(app: ChokaQ, db_url: str) -> None:
    ids = make_dead(
        app.storage, 2, queue="m", type="email_v1", reason=FailureReason.ZOMBIE, details="Zombie detected\nmore"
    )
    make_dead(app.storage, 1, queue="m", type="other")
    r = run(db_url, "dlq", "list", "--reason", "zombie", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["total"] == 2 and {j["id"] for j in out["items"]} == set(ids)
    r = run(db_url, "dlq", "list", "--queue", "m")
    assert r.exit_code == 0 and "REASON" in r.stdout and "Zombie detected" in r.stdout and "more" not in r.stdout
    r = run(db_url, "dlq", "show", ids[0])
    shown = json.loads(r.stdout)
    assert shown["error_details"] == "Zombie detected\nmore" and shown["payload_schema"] is None
    assert run(db_url, "dlq", "show", "nope").exit_code == 1
    assert run(db_url, "dlq", "list", "--reason", "sleepy").exit_code == 2


def test_dlq_resurrect_ids_filter_confirm_and_audit(app: ChokaQ, db_url: str) -> None:
    s = app.storage
    ids = make_dead(s, 5, queue="r", reason=FailureReason.FATAL_ERROR)
    r = run(db_url, "dlq", "resurrect", ids[0], ids[1], "--yes", "--actor", "cli:alice")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["affected"] == 2
    assert s.get_job(ids[0]).location is Location.HOT  # type: ignore[union-attr]
    assert failed_total(s, "r") == 3
    # Dry run by filter changes nothing.
    r = run(db_url, "dlq", "resurrect", "--filter-queue", "r", "--filter-reason", "FatalError", "--dry-run")
    assert json.loads(r.stdout)["matched"] == 3 and failed_total(s, "r") == 3
    # Without --yes it asks; "n" aborts.
    r = run(db_url, "dlq", "resurrect", "--filter-queue", "r", input="n\n")
    assert r.exit_code == 1 and failed_total(s, "r") == 3
    r = run(db_url, "dlq", "resurrect", "--filter-queue", "r", "--max-jobs", "2", input="y\n")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.splitlines()[-1])["affected"] == 2 and failed_total(s, "r") == 1
    # Ids and a filter together are refused.
    assert run(db_url, "dlq", "resurrect", ids[4], "--filter-queue", "r").exit_code == 2
    from chokaq.storage.admin import AdminStore

    rows, _ = AdminStore(s).list_audit()
    assert [(a["actor"], a["role"], a["job_count"]) for a in rows][-1] == ("cli:alice", "admin", 2)


def test_dlq_purge_by_filter(app: ChokaQ, db_url: str) -> None:
    make_dead(app.storage, 4, queue="p", type="x")
    keep = make_dead(app.storage, 1, queue="p", type="y")
    r = run(db_url, "dlq", "purge", "--filter-type", "x", "--yes")
    assert r.exit_code == 0 and json.loads(r.stdout)["affected"] == 4
    left = app.storage.queue_stats()
    assert next(q.dlq_size for q in left if q.queue == "p") == 1
    assert app.storage.get_job(keep[0]) is not None


def test_archive_purge(app: ChokaQ, db_url: str) -> None:
    make_archived(app.storage, 3)
    r = run(db_url, "archive", "purge", "--older-than", "30d", "--yes")
    assert json.loads(r.stdout)["deleted"] == 0
    tomorrow = (datetime.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S+00:00")
    r = run(db_url, "archive", "purge", "--older-than", tomorrow, input="y\n")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.splitlines()[-1])["deleted"] == 3
    assert run(db_url, "archive", "purge", "--older-than", "last tuesday", "--yes").exit_code == 2


def test_retention_command_purges_the_dlq_only_when_dlq_days_is_set(app: ChokaQ, db_url: str) -> None:
    import time

    from chokaq.storage.admin import AdminStore

    dead = make_dead(app.storage, 2)
    time.sleep(0.2)
    r = run(db_url, "retention")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["dlq_deleted"] == 0 and out["dlq_older_than"] is None
    assert all(app.storage.get_job(i) is not None for i in dead)
    r = CliRunner().invoke(
        cli, ["--db", db_url, "retention"], env={"CHOKAQ_RETENTION__DLQ_DAYS": "0.000001"}, catch_exceptions=False
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["dlq_deleted"] == 2
    assert all(app.storage.get_job(i) is None for i in dead)
    rows, _ = AdminStore(app.storage).list_audit(actor="system:retention")
    assert [(a["action"], a["details"]["deleted"]) for a in rows] == [("dlq.retention", 2)]
    bad = CliRunner().invoke(cli, ["--db", db_url, "retention"], env={"CHOKAQ_RETENTION__DLQ_DAYS": "-1"})
    assert bad.exit_code != 0 and "dlq_days" in bad.output


def test_parse_older_than() -> None:
    now = datetime(2026, 5, 1, 12, 0, 0)
    assert admin_cmds.parse_older_than("30d", now) == datetime(2026, 4, 1, 12, 0, 0)
    assert admin_cmds.parse_older_than("90m", now) == datetime(2026, 5, 1, 10, 30, 0)
    assert admin_cmds.parse_older_than("2026-01-01T02:00:00+02:00") == datetime(2026, 1, 1, 0, 0, 0)
    assert admin_cmds.parse_older_than("2026-01-01T00:00:00Z") == datetime(2026, 1, 1, 0, 0, 0)


def test_serve_runs_uvicorn_with_the_api(db_url: str, app: ChokaQ, monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda api, **kw: seen.update(api=api, **kw))
    r = run(db_url, "serve", "--host", "0.0.0.0", "--port", "8088")
    assert r.exit_code == 0, r.output
    assert (seen["host"], seen["port"]) == ("0.0.0.0", 8088)
    assert "/api/dlq/{job_id}/resurrect" in seen["api"].openapi()["paths"]
    assert "no admin tokens" in r.stderr


def test_dlq_list_says_when_its_total_is_a_lower_bound(app: ChokaQ, db_url: str) -> None:
    make_dead(app.storage, 5, queue="cap")
    env = {"CHOKAQ_ADMIN__EXACT_COUNT_LIMIT": "2"}
    r = CliRunner().invoke(cli, ["--db", db_url, "dlq", "list", "--page-size", "3"], env=env, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "-- 1-3 of 3+" in r.stderr
    r = CliRunner().invoke(
        cli, ["--db", db_url, "dlq", "list", "--page-size", "3", "--json"], env=env, catch_exceptions=False
    )
    out = json.loads(r.stdout)
    assert (out["total"], out["total_is_lower_bound"], len(out["items"])) == (3, True, 3)
    last = json.loads(run(db_url, "dlq", "list", "--page-size", "3", "--page", "2", "--json").stdout)
    assert (last["total"], last["total_is_lower_bound"]) == (5, False)
