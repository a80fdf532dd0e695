"""``chokaq workers``: the table (control characters stripped), --state, --json, one worker's jobs,
and a missing worker as a one-line error with a non-zero exit."""

from __future__ import annotations

import json

from click.testing import CliRunner

from chokaq import ChokaQ
from chokaq.cli.main import cli
from chokaq.domain.models import EnqueueRequest
from chokaq.domain.workers import WorkerIdentity
from chokaq.storage import WorkerPresence


def _run(app: ChokaQ, *args: str) -> tuple[int, str]:
    r = CliRunner().invoke(cli, ["--db", app.settings.storage_url, "workers", *args])
    return r.exit_code, r.output


def test_the_table_the_filter_json_and_one_workers_jobs(app: ChokaQ) -> None:
    WorkerPresence(app.storage, WorkerIdentity("w-live", "box\x1b[2J", 11, "0.1.0", None, 4)).record(0, starting=True)
    gone = WorkerPresence(app.storage, WorkerIdentity("w-gone", "box-2", 12, "0.1.0", ("mail",), 2))
    gone.record(0, starting=True)
    gone.stopped()
    app.storage.enqueue(EnqueueRequest(type="t_v1"))
    (held,) = app.storage.fetch("w-live", 1, start=True)

    code, out = _run(app)
    assert code == 0, out
    lines = out.strip().splitlines()
    assert lines[0].startswith("WORKER") and len(lines) == 3 and "\x1b" not in out
    assert lines[1].split()[:2] == ["w-live", "live"] and lines[1].split()[5:7] == ["1", "0"]  # holds one
    assert lines[2].split()[:2] == ["w-gone", "stopped"]

    code, out = _run(app, "--state", "stopped", "--json")
    (only,) = json.loads(out)
    assert code == 0 and only["worker_id"] == "w-gone" and only["queues"] == ["mail"] and only["stopped_at_utc"]

    code, out = _run(app, "w-live", "--json")
    detail = json.loads(out)
    assert code == 0 and [j["id"] for j in detail["held_jobs"]] == [held.id] and detail["zombie_jobs"] == []
    code, out = _run(app, "w-live")
    assert code == 0 and held.id in out and "Processing" in out


def test_a_missing_worker_or_a_bad_state_is_one_line_and_a_non_zero_exit(app: ChokaQ) -> None:
    code, out = _run(app, "nobody")
    assert code != 0 and "no worker 'nobody'" in out and len(out.strip().splitlines()) == 1
    code, out = _run(app, "--state", "zombie")
    assert code != 0 and "zombie" in out
