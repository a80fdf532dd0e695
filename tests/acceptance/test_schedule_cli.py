"""`chokaq` and schedules as a user meets them: a bad schedule refuses to start (one line, exit 2,
nothing written), `db upgrade` stores the code's schedules, `chokaq schedules ...` lists, pauses,
resumes and runs them, audited."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.acceptance.conftest import ROOT, run_cli

APP = "tests.apps.scheduleapp:app"

BAD = {
    "bad_cron": (
        'app.schedule("nightly-report", "0 25 * * *", job="r_v1")',
        "invalid cron expression '0 25 * * *': Bad hour",
    ),
    "bad_zone": ('app.schedule("nightly-report", "0 3 * * *", job="r_v1", tz="Europe/Osloo")', "unknown time zone"),
    "bad_job": ('app.schedule("nightly-report", "0 3 * * *", job="report_v1")', "no handler for job type 'report_v1'"),
    "bad_payload": (
        'app.schedule("nightly-report", "0 3 * * *", job="m_v1", payload={"nom": 1})',
        "payload refused for 'm_v1'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("command", [("worker",), ("sweep",), ("db", "upgrade")])
def test_a_bad_schedule_refuses_to_start(tmp_path: Path, case: str, command: tuple[str, ...]) -> None:
    line, message = BAD[case]
    (tmp_path / f"{case}.py").write_text(
        "from pydantic import BaseModel\nfrom chokaq import ChokaQ\n\n"
        "class M(BaseModel):\n    name: str\n\n"
        "app = ChokaQ()\n\n"
        '@app.job("r_v1")\ndef r(p: dict) -> None: ...\n\n'
        '@app.job("m_v1", payload=M)\ndef m(p: M) -> None: ...\n\n' + line + "\n"
    )
    db = tmp_path / "never.db"
    out = run_cli(f"sqlite:///{db}", *command, "--app", f"{case}:app", PYTHONPATH=f"{ROOT}:{tmp_path}")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("error: schedule 'nightly-report': ")
    assert message in out.stderr
    assert not db.exists()  # nothing written, not even the schema


def test_upgrade_then_list_pause_resume_run(sqlite_url: str) -> None:
    up = run_cli(sqlite_url, "db", "upgrade", "--app", APP)
    assert up.returncode == 0, up.stderr
    assert json.loads(up.stdout)["schedules"] == {"created": ["every-second"], "updated": [], "orphaned": []}
    listed = run_cli(sqlite_url, "schedules", "list", "--json")
    (row,) = json.loads(listed.stdout)
    assert (row["name"], row["cron"], row["cron_in_words"], row["paused"]) == (
        "every-second",
        "* * * * * *",
        "Every second",
        False,
    )
    paused = run_cli(sqlite_url, "schedules", "pause", "every-second", "--actor", "ana")
    assert paused.returncode == 0 and json.loads(paused.stdout)["paused"] is True
    ran = run_cli(sqlite_url, "schedules", "run", "every-second", "--actor", "ana")
    assert ran.returncode == 0, ran.stderr
    job_id = ran.stdout.strip()
    shown = json.loads(run_cli(sqlite_url, "job", "show", job_id).stdout)
    assert (shown["type"], shown["queue"], shown["created_by"]) == ("tick_v1", "ticks", "ana")
    resumed = run_cli(sqlite_url, "schedules", "resume", "every-second")
    assert resumed.returncode == 0 and json.loads(resumed.stdout)["paused"] is False
    table = run_cli(sqlite_url, "schedules", "list").stdout
    assert "every-second" in table and "active" in table and job_id in table
    missing = run_cli(sqlite_url, "schedules", "pause", "nope")
    assert missing.returncode == 1 and missing.stderr.strip() == "error: no schedule 'nope'"
