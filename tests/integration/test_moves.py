"""Moves between tables on PostgreSQL: one statement (writable CTEs) on the worker's path, and the
portable two-statement form that SQL Server runs, both under real row locks."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import text

from chokaq.domain.models import EnqueueRequest, JobRecord
from chokaq.domain.states import Location
from chokaq.storage import Storage
from chokaq.storage.moving import move_in_db
from chokaq.storage.statements import complete_statements, fence_params
from chokaq.storage.store import Completion
from tests.helpers import counts, totals


@pytest.fixture
def pg(pg_url: str) -> Iterator[Storage]:
    s = Storage(pg_url)
    s.upgrade()
    try:
        yield s
    finally:
        s.close()


def running(s: Storage, worker: str, queues: list[str], per_queue: int) -> list[JobRecord]:
    s.enqueue_many([EnqueueRequest(type="t", queue=q) for q in queues for _ in range(per_queue)])
    jobs = s.fetch(worker, len(queues) * per_queue)
    return s.start(worker, jobs).started


def succeeded(s: Storage) -> dict[str, int]:
    rows = s.read(lambda c: c.execute(text('SELECT "Queue", "SucceededTotal" FROM chokaq."StatsSummary"')).all())
    return {r[0]: r[1] for r in rows}


def test_concurrent_completes_across_queues_keep_counts_exact(pg: Storage) -> None:
    """Many completes at once, each touching the same counter rows: no deadlock, no lost count."""
    queues = [f"q{i}" for i in range(4)]
    workers = [f"w{i}" for i in range(6)]
    batches = {w: running(pg, w, queues, 10) for w in workers}
    barrier = threading.Barrier(len(workers))

    def finish(worker: str) -> int:
        jobs = batches[worker]
        barrier.wait()
        done = 0
        for i in range(0, len(jobs), 5):  # several statements per worker, interleaved with the others
            done += len(pg.complete(worker, [Completion(j.lease, 1) for j in jobs[i : i + 5]]))
        return done

    with ThreadPoolExecutor(len(workers)) as pool:
        done = sum(pool.map(finish, workers))
    assert done == len(workers) * len(queues) * 10
    assert succeeded(pg) == {q: len(workers) * 10 for q in queues}
    assert counts(pg) == {"archive": done, "dlq": 0}
    durations = pg.read(lambda c: c.execute(text('SELECT DISTINCT "DurationMs" FROM chokaq."JobsArchive"')).all())
    assert durations == [(1,)]


def test_complete_waits_for_a_row_another_mover_holds_and_then_skips_it(pg: Storage) -> None:
    """The sweep (or an operator) locks a job first and takes it away: the worker's complete
    must block on the row, then leave it alone; the job ends in exactly one table."""
    (job,) = running(pg, "w1", ["default"], 1)
    holder = pg.engine.connect()
    tx = holder.begin()
    holder.execute(text('SELECT 1 FROM chokaq."JobsHot" WHERE "Id" = :id FOR UPDATE'), {"id": job.id})
    result: dict[str, set[str]] = {}
    worker = threading.Thread(target=lambda: result.update(done=pg.complete("w1", [Completion(job.lease, 7)])))
    worker.start()
    worker.join(0.5)
    assert worker.is_alive(), "complete did not wait for the row lock"
    holder.execute(text('DELETE FROM chokaq."JobsHot" WHERE "Id" = :id'), {"id": job.id})
    tx.commit()
    holder.close()
    worker.join(10)
    assert result["done"] == set()
    assert pg.get_job(job.id) is None
    assert totals(pg) == (0, 0, 0)


def test_the_portable_move_works_under_postgres_locks(pg: Storage) -> None:
    """SQL Server runs the copy-then-delete form; here it runs against real row locks too."""
    jobs = running(pg, "w1", ["a", "b"], 3)
    groups, params = fence_params("w1", [j.lease for j in jobs[:4]])
    params["durations"] = "{}"
    moved = pg.write(lambda c: move_in_db(c, complete_statements(groups), params))
    assert len(moved) == 4
    for job_id, _ in moved:
        found = pg.get_job(job_id)
        assert found is not None and found.location is Location.ARCHIVE
    assert counts(pg) == {"processing": 2, "archive": 4, "dlq": 0}
    # The portable form leaves the counter to its caller (Storage.move bumps it in the same transaction).
    assert succeeded(pg) == {}
