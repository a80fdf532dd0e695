"""A worker killed while the database holds back its completions: how many Processing rows it leaves.

Handlers that return at once free their slots before their outcomes are written. If the worker went
on starting jobs while their outcomes queued up, one crash would leave every finished-but-unwritten
job Processing, and the sweep would send each to the DLQ as a Zombie that in fact ran to the end.
The worker stops starting once Concurrency outcomes wait to be written, so a crash leaves at most
the jobs that were running plus Concurrency finished ones (issue 35)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from chokaq.domain.models import EnqueueRequest
from chokaq.storage import Storage
from tests.acceptance.test_crash import open_storage, starts
from tests.helpers import counts, wait_for

CONCURRENCY = 8
JOBS = 400


@contextmanager
def _archive_locked(db_url: str) -> Iterator[None]:
    """PostgreSQL: a transaction holds JobsArchive, as a slow query or a failover would; every
    completion waits on it while claims and starts, which never touch the archive, go on."""
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            conn.execute(text('LOCK TABLE chokaq."JobsArchive" IN EXCLUSIVE MODE'))
            yield
            conn.rollback()
    finally:
        engine.dispose()


@contextmanager
def _flag(path: Path) -> Iterator[None]:
    path.touch()
    try:
        yield
    finally:
        path.unlink()


def _stall(db_url: str, tmp_path: Path) -> tuple[Callable[[], AbstractContextManager[None]], dict[str, str]]:
    """How to hold back this database's completions, and the worker's environment for it."""
    if db_url.startswith("postgresql"):
        return (lambda: _archive_locked(db_url)), {}
    flag = tmp_path / "stall"
    return (lambda: _flag(flag)), {"CHOKAQ_TEST_STALL_COMPLETIONS": str(flag)}


def _enqueue(s: Storage) -> list[str]:
    return [s.enqueue(EnqueueRequest(type="record"))[0] for _ in range(JOBS)]


def test_a_crash_during_a_completion_stall_leaves_at_most_twice_concurrency_processing(
    db_url: str, tmp_path: Path, workers: Any
) -> None:
    s = open_storage(db_url)
    stall, env = _stall(db_url, tmp_path)
    record = tmp_path / "record.txt"
    with stall():
        _enqueue(s)
        proc = workers(db_url, record, "--concurrency", str(CONCURRENCY), **env)
        # Every start the worker may make happens while nothing can be written back; the 4 s are
        # the stall of the scenario (a slow query, a log flush), long enough for a worker that does
        # not stop starting to run far past the bound.
        wait_for(lambda: len(starts(record)) >= 2 * CONCURRENCY, timeout=60)
        time.sleep(4)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    ran = starts(record)
    left = counts(s).get("processing", 0)
    # Nothing was written back during the stall: every job started is left Processing, although
    # each finished (instant handlers).
    assert left == len(ran), (left, len(ran))
    assert left <= 2 * CONCURRENCY, f"{left} jobs left Processing by one crash"
    assert all(n == 1 for n in ran.values())


def test_a_completion_stall_pauses_new_starts_and_then_everything_completes(
    db_url: str, tmp_path: Path, workers: Any
) -> None:
    s = open_storage(db_url)
    stall, env = _stall(db_url, tmp_path)
    record = tmp_path / "record.txt"
    with stall():
        ids = _enqueue(s)
        workers(db_url, record, "--concurrency", str(CONCURRENCY), **env)
        wait_for(lambda: len(starts(record)) >= 2 * CONCURRENCY, timeout=60)
        time.sleep(4)
        held = len(starts(record))
        assert held == 2 * CONCURRENCY, held  # paused at the bound, not starting on
    wait_for(lambda: counts(s).get("archive") == JOBS, timeout=120)
    ran = starts(record)
    assert sorted(ran) == sorted(ids) and all(n == 1 for n in ran.values())
    assert counts(s) == {"archive": JOBS, "dlq": 0}
