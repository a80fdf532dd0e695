"""A worker or a sweep on a database older than its code refuses to start, in one line that names
the fix, and changes nothing. Before, on a database at migration 11 (no EventFeed yet), a worker's
failure writes and every sweep were refused half-way by the database: the failures were abandoned,
Fetched jobs were never handed back, and jobs that had run became Zombies once someone upgraded."""

from __future__ import annotations

import sqlite3

from sqlalchemy import func, select

from chokaq.domain.models import EnqueueRequest
from chokaq.storage import Storage
from chokaq.storage.schema import jobs_hot
from tests.acceptance.conftest import run_cli


def test_a_worker_and_a_sweep_refuse_a_database_behind_their_code(sqlite_url: str) -> None:
    s = Storage(sqlite_url)
    s.upgrade()
    s.enqueue(EnqueueRequest(type="email_v1", payload='{"to": "a@example.com"}'))
    s.close()
    # As a database upgraded by the chokaq before the event feed would be.
    db = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    db.execute('DROP TABLE "EventFeed"')
    db.execute('DELETE FROM "SchemaMigrations" WHERE "Version" = 12')
    db.commit()
    db.close()

    for args in (("sweep",), ("--app", "chokaq.demo:app", "worker")):
        done = run_cli(sqlite_url, *args)
        assert done.returncode != 0, (args, done.stdout, done.stderr)
        # One error line (a worker also logs its own stop at INFO), no traceback.
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "migration(s) 12" in errors[0] and "chokaq db upgrade" in errors[0], done.stderr
        assert "Traceback" not in done.stderr

    s = Storage(sqlite_url)
    pending = s.read(
        lambda c: c.execute(select(func.count()).select_from(jobs_hot).where(jobs_hot.c.Status == 0)).scalar_one()
    )
    assert pending == 1  # nothing was claimed
    s.close()
    assert run_cli(sqlite_url, "db", "upgrade").returncode == 0
    assert run_cli(sqlite_url, "sweep").returncode == 0
