"""The Deck's and /api/stats' figures (storage/figures_cache.py: per-queue sizes, top errors, the
running totals StatsSummary keeps) equal a full count after a mixed run on three real worker
processes: successes, retries, dead letters, an operator's resurrects, purges and cancels, one
worker killed with SIGKILL mid-job and the sweep that turns its job into a zombie."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import FailureReason, Location
from chokaq.storage import Actor, Storage
from chokaq.storage.admin import AdminStore
from chokaq.storage.figures_cache import FiguresCache
from chokaq.storage.queue_figures import read_queue_stats
from chokaq.storage.schema import jobs_archive
from tests.acceptance.conftest import run_cli
from tests.helpers import wait_for
from tests.integration.test_admin_figures import comparable

OPS = Actor("ops@example.com", "operator")
WORKERS = 3
# Retries at once: the run is about counting, not waiting.
RETRY_NOW = {"CHOKAQ_RETRY__BASE_DELAY": "0", "CHOKAQ_RETRY__JITTER_MAX_DELAY": "0"}


def full_count(s: Storage) -> list[tuple[Any, ...]]:
    return comparable(s.read(lambda c: read_queue_stats(c, s.db_now(c))))


def archived_by_queue(s: Storage) -> dict[str, int]:
    rows = s.read(lambda c: c.execute(select(jobs_archive.c.Queue, func.count()).group_by(jobs_archive.c.Queue)).all())
    return {q: int(n) for q, n in rows}


def assert_figures_equal_a_full_count(s: Storage) -> None:
    """Counted on every read (a small table) and reused (a count taken as a large table's is):
    both equal a count of the tables made now; the successes StatsSummary kept equal the
    archive's rows (nothing was purged from it)."""
    want = full_count(s)
    admin = AdminStore(s)
    for limit in (10_000, 0):
        f = FiguresCache(s, exact_limit=limit, max_age=60).read()
        assert comparable(f.queues) == want, f"Admin.ExactCountLimit={limit}"
        assert f.top_errors == admin.top_errors()
    totals = {r[0]: r[4] for r in want if r[4]}
    assert totals == archived_by_queue(s)


def lines(record: Path) -> list[list[str]]:
    return [line.split() for line in record.read_text().splitlines()] if record.exists() else []


def test_figures_equal_a_full_count_after_a_mixed_run_on_three_workers(
    db_url: str, tmp_path: Path, workers: Any
) -> None:
    s = Storage(db_url)
    s.upgrade()
    admin = AdminStore(s)
    record = tmp_path / "record.txt"
    try:
        # Two handlers at a time each, all three serving before the jobs arrive: the work is
        # spread over the processes rather than claimed by the first one up.
        procs = [
            workers(db_url, record, "--queues", "mail,billing,crash", "--concurrency", "2", **RETRY_NOW)
            for _ in range(WORKERS)
        ]
        logs = [record.with_suffix(f".worker{i}.log") for i in range(WORKERS)]
        wait_for(lambda: all(log.exists() and b" started: queues=" in log.read_bytes() for log in logs), timeout=60)
        ok = [s.enqueue(EnqueueRequest(type="record", queue="mail"))[0] for _ in range(20)]
        bad = [s.enqueue(EnqueueRequest(type="always_fails", queue="mail"))[0] for _ in range(5)]
        once = [s.enqueue(EnqueueRequest(type="fails_once", queue="billing"))[0] for _ in range(5)]
        (slow, _) = s.enqueue(EnqueueRequest(type="slow", queue="crash", payload='{"seconds": 120}'))
        later = [s.enqueue(EnqueueRequest(type="record", queue="mail", delay_seconds=3600))[0] for _ in range(6)]
        # "ops" is served by none of them: its jobs stay where the test leaves them.

        def settled(ids: list[str]) -> bool:
            return all((j := s.get_job(i)) is not None and j.location is not Location.HOT for i in ids)

        wait_for(lambda: settled(ok + bad + once), timeout=120, interval=0.2)
        assert all(s.get_job(i).location is Location.DLQ for i in bad)  # type: ignore[union-attr]

        # The operator: resurrect two dead jobs (they fail three more times), purge one, cancel
        # three of the delayed jobs.
        admin.resurrect_many(OPS, ids=bad[:2])
        admin.purge_dlq(OPS, ids=bad[2:3])
        assert admin.cancel(later[:3], OPS).affected == 3
        wait_for(lambda: settled(bad[:2]), timeout=120, interval=0.2)

        # SIGKILL the worker running the slow job: it stays Processing until the sweep.
        started = wait_for(lambda: [p for what, i, p in lines(record) if what == "start" and i == slow], timeout=60)
        (victim,) = [p for p in procs if str(p.pid) == started[0]]
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        assert s.get_job(slow).location is Location.HOT  # type: ignore[union-attr]

        def swept() -> bool:
            out = run_cli(db_url, "sweep")
            assert out.returncode == 0, out.stderr
            return bool(json.loads(out.stdout)["archived"])

        wait_for(swept, timeout=60, interval=0.2)
        zombie = s.get_job(slow)
        assert zombie is not None and zombie.failure_reason == FailureReason.ZOMBIE
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        assert sorted(p.wait(60) for p in procs) == [-signal.SIGKILL, 0, 0]

        # Left Fetched (claimed, never started) and Processing (started, never finished).
        held = [s.enqueue(EnqueueRequest(type="held", queue="ops"))[0] for _ in range(2)]
        claimed = s.fetch("w-held", 10, ["ops"])
        assert sorted(r.id for r in claimed) == sorted(held)
        s.start("w-held", claimed[:1])

        assert_figures_equal_a_full_count(s)
        # And the figures are the run's: every process's work counted once.
        by_queue = {r[0]: r for r in full_count(s)}
        assert by_queue["mail"][1] == 3 and by_queue["mail"][7] == 4 + 3  # delayed left; dead + cancelled
        assert by_queue["mail"][4] == 20 and by_queue["billing"][4] == 5 and by_queue["billing"][6] == 5
        assert by_queue["crash"][7] == 1 and (by_queue["ops"][2], by_queue["ops"][3]) == (1, 1)
        ran = Counter(i for what, i, _ in lines(record) if what == "start")
        assert all(ran[i] == 1 for i in ok) and all(ran[i] == 2 for i in once)
        assert [ran[i] for i in bad] == [6, 6, 3, 3, 3]
        assert len({p for _, _, p in lines(record)}) == WORKERS, "a process ran nothing"
    finally:
        s.close()
