"""Hostile job logs: control characters, NUL, lone surrogates, 10 MB strings and secrets, from
ctx.log, its fields, a logging record and a progress note. The job still completes (its write is
never refused), the stored value is ASCII and bounded, and the API and the CLI show it safely."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from fastapi.testclient import TestClient

from chokaq import JobContext
from chokaq.api.app import create_api
from chokaq.domain.job_logs import MAX_LINE_CHARS
from chokaq.domain.states import Location
from tests.acceptance.conftest import run_cli
from tests.helpers import wait_for
from tests.integration.test_worker import make_app

TEN_MB = 10 * 1024 * 1024
NASTY = "nul\x00 esc\x1b[2J bell\x07 cr\r bidi\u202eevil lone\udc80 at postgres://u:hunter2@db/x?sslmode=require"
# What a terminal or a page would act on: controls but newline, and bidi overrides.
ACTIVE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_hostile_lines_are_stored_bounded_and_shown_safely(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url)
    log = logging.getLogger("tests.joblogs.hostile")
    log.setLevel(logging.INFO)

    @app.job("hostile_v1")
    def hostile(payload: dict[str, Any], ctx: JobContext) -> None:
        ctx.log(NASTY, token="abc123", url="https://x:secret@h/", big="y" * TEN_MB, **{"k\x00\u202e": "\udcff"})
        log.error("huge %s", "z" * TEN_MB)
        log.warning("record with %s", NASTY)
        ctx.progress(1, 2, note="\x1b[31m" + "n" * TEN_MB)

    job_id = app.enqueue("hostile_v1", {})
    run_worker(app)
    wait_for(lambda: (r := app.storage.get_job(job_id)) is not None and r.location is not Location.HOT, timeout=60)
    rec = app.storage.get_job(job_id)
    assert rec is not None and rec.location is Location.ARCHIVE  # the write was not refused
    assert rec.logs is not None and rec.progress is not None
    assert rec.logs.isascii() and rec.progress.isascii()
    assert len(rec.logs) <= app.settings.execution.job_log_max_chars
    for secret in ("hunter2", "secret@", "abc123"):
        assert secret not in rec.logs and secret not in rec.progress

    with TestClient(create_api(app, dev_open=True)) as client:
        shown = client.get(f"/api/jobs/{job_id}")
    assert shown.status_code == 200
    out = shown.json()
    first, huge, record = out["logs"]["lines"]
    # NUL and the lone surrogate come back as escapes written out; the rest as the handler sent it,
    # for the Deck and the CLI to show as escapes (JSON keeps them escaped on the wire).
    assert first["message"].startswith(
        "nul\\x00 esc\x1b[2J bell\x07 cr\r bidi\u202eevil lone\\udc80 at postgres://u:***@db/x"
    )
    assert first["fields"]["token"] == "***" and first["fields"]["url"] == "https://x:***@h/"
    assert "characters cut" in first["fields"]["big"] and len(first["fields"]["big"]) < 300
    assert first["fields"]["k\\x00\u202e"] == "\\udcff"
    assert (
        huge["level"] == "ERROR" and len(huge["message"]) < MAX_LINE_CHARS + 100 and "characters cut" in huge["message"]
    )
    assert record["logger"] == "tests.joblogs.hostile" and "u:***@db" in record["message"]
    assert len(out["progress"]["note"]) < 300

    text = run_cli(db_url, "job", "show", job_id, "--logs")
    assert text.returncode == 0, text.stderr
    assert not ACTIVE.search(text.stdout), repr(ACTIVE.search(text.stdout))
    assert "\\u001b[2J" in text.stdout and "\\u202eevil" in text.stdout and "postgres://u:***@db/x" in text.stdout
    assert "hunter2" not in text.stdout and "progress: 1 of 2" in text.stdout
    as_json = run_cli(db_url, "job", "show", job_id)
    assert not ACTIVE.search(as_json.stdout) and json.loads(as_json.stdout)["logs"] == out["logs"]
