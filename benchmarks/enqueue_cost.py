"""What enqueueing costs a producer on PostgreSQL, side by side: chokaq's single, async and bulk
enqueue (sync and async; the async ones on the app's producer threads, or on the event loop through
psycopg's AsyncConnection with ``CHOKAQ_STORAGE__PRODUCER_ON_LOOP=true``) against a bare psycopg INSERT of the
same row, pgqueuer's ``Queries.enqueue`` (one job, and lists) and procrastinate's ``defer_async``
and ``batch_defer_async``. Jobs/s and client CPU per job; for chokaq's async enqueue also how late
a concurrent 1 ms "ping" coroutine runs, idle and while the enqueues go on (the event loop must
not wait for the database).

    .venv/bin/python benchmarks/enqueue_cost.py [--jobs 5000] [--batch 1000] [--concurrency 20]
        [--bench-python .venv-bench/bin/python] [--root DIR] [--json]

``--bench-python``: the peers' venv (``make bench-peers`` builds it, see the Makefile's
BENCH_VENV); without it only chokaq's rows are measured. ``--root``: the checkout to import chokaq
from (another worktree, for a paired comparison with an older commit; run the two alternately).
Each system gets a fresh database (``bench_enqueue``, recreated per run). Not run by CI, and not
meaningful on a busy machine: every row carries the machine's CPU note (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

DB = "bench_enqueue"
HERE = Path(__file__).resolve()


def row(system: str, mode: str, n: int, seconds: float, cpu_seconds: float, **extra: Any) -> dict[str, Any]:
    return {
        "system": system,
        "mode": mode,
        "jobs": n,
        "jobs_per_s": n / seconds if seconds else float("nan"),
        "cpu_us_per_job": cpu_seconds / n * 1e6,
        **extra,
    }


def measured(system: str, mode: str, n: int, fn: Callable[[], Any], **extra: Any) -> dict[str, Any]:
    cpu0, t0 = time.process_time(), time.perf_counter()
    fn()
    return row(system, mode, n, time.perf_counter() - t0, time.process_time() - cpu0, **extra)


async def measured_async(system: str, mode: str, n: int, fn: Callable[[], Awaitable[Any]]) -> dict[str, Any]:
    cpu0, t0 = time.process_time(), time.perf_counter()
    await fn()
    return row(system, mode, n, time.perf_counter() - t0, time.process_time() - cpu0)


def slices(n: int, size: int) -> list[range]:
    return [range(i, min(n, i + size)) for i in range(0, n, size)]


# --------------------------------------------------------------------------- chokaq
async def ping_lateness(stop: asyncio.Event, out: list[float]) -> None:
    """A 1 ms ticker: how late each tick wakes (ms) is how long something else held the loop."""
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.001)
        out.append((time.perf_counter() - t - 0.001) * 1e3)


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) >= 100 else max(values, default=float("nan"))


async def chokaq_async(app: Any, n: int, concurrency: int) -> dict[str, Any]:
    idle: list[float] = []
    stop = asyncio.Event()
    ticker = asyncio.create_task(ping_lateness(stop, idle))
    await asyncio.sleep(0.5)
    stop.set()
    await ticker
    busy: list[float] = []
    stop = asyncio.Event()
    ticker = asyncio.create_task(ping_lateness(stop, busy))
    todo = iter(range(n))

    async def producer() -> None:
        for i in todo:
            await app.enqueue_async("t", {"i": i})

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(producer() for _ in range(concurrency)))
    out = row("chokaq", f"enqueue_async x{concurrency}", n, time.perf_counter() - t0, time.process_time() - cpu0)
    stop.set()
    await ticker
    out.update(ping_p99_idle_ms=p99(idle), ping_p99_busy_ms=p99(busy), ping_p99_ratio=p99(busy) / max(p99(idle), 1e-3))
    return out


def run_chokaq(args: Any) -> list[dict[str, Any]]:
    sys.path.insert(0, args.root)
    import psycopg

    from benchmarks.peers.common import conninfo, drop_database, dsn_url, recreate_database
    from chokaq import ChokaQ

    recreate_database(DB)
    app = ChokaQ(storage_url=dsn_url(DB).replace("postgresql://", "postgresql+psycopg://", 1))
    rows = []
    try:
        app.storage.upgrade()
        app.enqueue("t", {"i": 0})  # the queue's row
        n = args.jobs
        rows.append(measured("chokaq", "enqueue", n, lambda: [app.enqueue("t", {"i": i}) for i in range(n)]))
        rows.append(asyncio.run(chokaq_async(app, n, args.concurrency)))

        def bulk() -> None:
            for part in slices(n, args.batch):
                app.enqueue_many([app.prepare("t", {"i": i}) for i in part])

        rows.append(measured("chokaq", f"enqueue_many /{args.batch}", n, bulk))

        async def bulk_async() -> None:
            for part in slices(n, args.batch):
                await app.enqueue_many_async([app.prepare("t", {"i": i}) for i in part])

        rows.append(asyncio.run(measured_async("chokaq", f"enqueue_many_async /{args.batch}", n, bulk_async)))
        with psycopg.connect(conninfo(DB), autocommit=True) as raw:
            sql = (
                'INSERT INTO chokaq."JobsHot" ("Id", "Queue", "Type", "Payload", "Priority", "Status", '
                '"AttemptCount", "ScheduledAtUtc", "CreatedAtUtc", "LastUpdatedUtc", "ZombieRetry") '
                "VALUES (%s, %s, %s, %s, %s, 0, 0, now(), now(), now(), false) "
                "RETURNING pg_notify('chokaq', \"Queue\")"
            )

            def bare() -> None:
                for i in range(n):
                    raw.execute(sql, (uuid.uuid4().hex, "default", "t", f'{{"i":{i}}}', 10), prepare=True).fetchall()

            rows.append(measured("psycopg", "bare INSERT", n, bare))
    finally:
        app.close()
        drop_database(DB)
    return rows


# --------------------------------------------------------------------------- peers (bench venv)
async def run_pgqueuer(args: Any) -> list[dict[str, Any]]:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    from benchmarks.peers.common import drop_database, dsn_url, recreate_database

    recreate_database(DB)
    conn = await asyncpg.connect(dsn_url(DB))
    try:
        q = Queries(AsyncpgDriver(conn))
        await q.install()
        n = args.jobs

        async def single() -> None:
            for _ in range(n):
                await q.enqueue("t", b"{}", 0)

        async def lists() -> None:
            for part in slices(n, args.batch):
                await q.enqueue(["t"] * len(part), [b"{}"] * len(part), [0] * len(part))

        return [
            await measured_async("pgqueuer", "enqueue", n, single),
            await measured_async("pgqueuer", f"enqueue lists /{args.batch}", n, lists),
        ]
    finally:
        await conn.close()
        drop_database(DB)


async def run_procrastinate(args: Any) -> list[dict[str, Any]]:
    import procrastinate

    from benchmarks.peers.common import conninfo, drop_database, recreate_database

    recreate_database(DB)
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo(DB)))

    @app.task(name="t")
    async def t(i: int) -> None: ...

    try:
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            n = args.jobs

            async def single() -> None:
                for i in range(n):
                    await t.defer_async(i=i)

            async def batch() -> None:
                for part in slices(n, args.batch):
                    await t.batch_defer_async(*({"i": i} for i in part))

            return [
                await measured_async("procrastinate", "defer_async", n, single),
                await measured_async("procrastinate", f"batch_defer_async /{args.batch}", n, batch),
            ]
    finally:
        drop_database(DB)


def peer_rows(args: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if not args.bench_python:
        return rows
    for peer in ("pgqueuer", "procrastinate"):
        cmd = [args.bench_python, str(HERE), "--peer", peer, "--jobs", str(args.jobs), "--batch", str(args.batch)]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE.parents[1], timeout=1800)
        if done.returncode != 0:
            print(f"{peer}: failed: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            continue
        rows += json.loads(done.stdout)
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'system':<14} {'mode':<28} {'jobs/s':>10} {'CPU us/job':>11}  notes")
    for r in rows:
        note = ""
        if "ping_p99_ratio" in r:
            note = (
                f"ping p99 {r['ping_p99_busy_ms']:.2f} ms busy / {r['ping_p99_idle_ms']:.2f} ms idle "
                f"({r['ping_p99_ratio']:.2f}x)"
            )
        print(f"{r['system']:<14} {r['mode']:<28} {r['jobs_per_s']:>10.0f} {r['cpu_us_per_job']:>11.0f}  {note}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=1000, help="jobs per bulk call")
    ap.add_argument("--concurrency", type=int, default=20, help="concurrent enqueue_async producers")
    ap.add_argument("--root", default=str(HERE.parents[1]))
    ap.add_argument("--bench-python", default=None, help="the peers' venv python (see BENCH_VENV)")
    ap.add_argument("--peer", choices=["pgqueuer", "procrastinate"], help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.peer:  # a child in the peers' venv: its rows as JSON on stdout
        sys.path.insert(0, str(HERE.parents[1]))
        runner = run_pgqueuer if args.peer == "pgqueuer" else run_procrastinate
        print(json.dumps(asyncio.run(runner(args))))
        return
    sys.path.insert(0, str(HERE.parents[1]))
    from benchmarks.peers.common import CpuSampler

    with CpuSampler() as machine:
        rows = run_chokaq(args) + peer_rows(args)
    if args.json:
        print(json.dumps({"rows": rows, "machine": machine.note()}))
        return
    print_table(rows)
    print(f"-- {machine.note()}")


if __name__ == "__main__":
    main()
