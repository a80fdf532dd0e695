"""The CLI prints job data in tables: escape sequences in it must not reach the terminal."""

from __future__ import annotations

from click.testing import CliRunner
from sqlalchemy import update

from chokaq import ChokaQ
from chokaq.cli.main import cli
from chokaq.storage.schema import jobs_dlq
from tests.api.helpers import make_dead

HOSTILE = {
    "Type": "evil\x1b]0;owned\x07type",
    "Queue": "q\x1b[2J\x1b[H",
    "ErrorDetails": "\x1b[31mred\x9b31m\u202eoverride\rcarriage\nsecond line",
    "LastModifiedBy": "actor\x1b[8m",
}


def test_dlq_list_strips_control_characters(app: ChokaQ) -> None:
    (job,) = make_dead(app.storage, 1)
    with app.storage.engine.begin() as c:  # data a handler, a producer or an SQL script could leave
        c.execute(update(jobs_dlq).where(jobs_dlq.c.Id == job).values(**HOSTILE))
    r = CliRunner().invoke(cli, ["--db", app.settings.storage_url, "dlq", "list"])
    assert r.exit_code == 0, r.output
    out = r.stdout
    for ch in ("\x1b", "\x07", "\x9b", "\u202e", "\r"):
        assert ch not in out, repr(ch)
    assert job in out and "evil" in out and "owned" in out and "red" in out
    assert len(out.strip().splitlines()) == 2  # header + one row: no injected line breaks
