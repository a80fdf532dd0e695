"""Four worker processes share 2000 jobs on PostgreSQL: each job runs and is archived exactly once."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from chokaq.domain.models import EnqueueRequest
from chokaq.storage import Storage
from chokaq.storage.schema import jobs_archive
from tests.helpers import counts, totals, wait_for

JOBS = 2000


def test_four_processes_2000_jobs_exactly_once(pg_url: str, tmp_path: Path, workers: Any) -> None:
    s = Storage(pg_url)
    s.upgrade()
    ids = s.enqueue_many([EnqueueRequest(type="record", payload=f'{{"n": {i}}}') for i in range(JOBS)])
    record = tmp_path / "record.txt"
    procs = [workers(pg_url, record, "--concurrency", "8") for _ in range(4)]
    wait_for(lambda: counts(s).get("archive") == JOBS, timeout=240, interval=0.25)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    assert [p.wait(30) for p in procs] == [0, 0, 0, 0]

    lines = [line.split() for line in record.read_text().splitlines()]
    started = Counter(parts[1] for parts in lines)
    assert set(started) == set(ids), "every job ran"
    assert max(started.values()) == 1, "no job started twice"
    assert len({parts[2] for parts in lines}) == 4, "all four processes took part"
    assert counts(s) == {"archive": JOBS, "dlq": 0}
    assert totals(s) == (JOBS, 0, 0)

    def archived_once(c: Any) -> tuple[int, int, int]:
        n = c.execute(
            select(func.count(), func.count(func.distinct(jobs_archive.c.Id)), func.max(jobs_archive.c.AttemptCount))
        ).one()
        return int(n[0]), int(n[1]), int(n[2])

    assert s.read(archived_once) == (JOBS, JOBS, 1)
