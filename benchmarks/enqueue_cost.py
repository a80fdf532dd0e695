"""What one enqueue costs a producer on PostgreSQL: ``app.enqueue`` against a bare psycopg INSERT
of the same row, on the same server (wall-clock median and CPU per call).

    .venv/bin/python benchmarks/enqueue_cost.py [--calls 2000] [--root DIR]

``--root``: the checkout to import chokaq from (another worktree, for a paired comparison with an
older commit; run the two alternately). Uses the database ``bench_enqueue``, recreated each run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any


def timed(fn: Callable[[int], Any], n: int) -> tuple[float, float]:
    """(median wall ms, CPU µs per call)."""
    walls = []
    cpu0 = time.process_time()
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        walls.append(time.perf_counter() - t)
    return statistics.median(walls) * 1e3, (time.process_time() - cpu0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[1]))
    args = ap.parse_args()
    sys.path.insert(0, args.root)
    import psycopg

    import chokaq
    from benchmarks.peers.common import conninfo, drop_database, dsn_url, recreate_database
    from chokaq import ChokaQ

    recreate_database("bench_enqueue")
    app = ChokaQ(storage_url=dsn_url("bench_enqueue").replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        app.storage.upgrade()
        app.enqueue("t", {"i": 0})  # the queue's row
        wall, cpu = timed(lambda i: app.enqueue("t", {"i": i, "t": 1.0}), args.calls)
        where = Path(chokaq.__file__).parent
        print(f"app.enqueue        p50 {wall:.3f} ms, {cpu:.0f} us CPU per call  (chokaq from {where})")
        with psycopg.connect(conninfo("bench_enqueue"), autocommit=True) as raw:
            sql = (
                'INSERT INTO chokaq."JobsHot" ("Id", "Queue", "Type", "Payload", "Priority", "Status", '
                '"AttemptCount", "ScheduledAtUtc", "CreatedAtUtc", "LastUpdatedUtc", "ZombieRetry") '
                "VALUES (%s, %s, %s, %s, %s, 0, 0, now(), now(), now(), false) "
                "RETURNING pg_notify('chokaq', \"Queue\")"
            )

            def insert(i: int) -> None:
                raw.execute(sql, (uuid.uuid4().hex, "default", "t", '{"i":1}', 10), prepare=True).fetchall()

            wall, cpu = timed(insert, args.calls)
            print(f"bare psycopg INSERT p50 {wall:.3f} ms, {cpu:.0f} us CPU per call")
    finally:
        app.close()
        drop_database("bench_enqueue")


if __name__ == "__main__":
    main()
