"""pgqueuer side of the peer benchmark: no-op throughput and enqueue->start latency.

Run from the repo root with the bench venv:

    .venv-bench/bin/python benchmarks/peers/pgqueuer_bench.py --jobs 5000 --concurrency 10 --rounds 3

Worker setup follows pgqueuer's README / `pgq run` / its tools/benchmark.py:
  * asyncpg driver (`PgQueuer(AsyncpgDriver(connection))`, one connection per worker,
    pgqueuer's documented faster driver); `--driver psy` uses psycopg 3 async instead;
  * uvloop event loop (what `pgq run` uses when uvloop is installed, and it is a pgqueuer dependency);
  * `PgQueuer.run(batch_size=20, ...)`, i.e. dequeue batch 20 to match chokaq's fetch batch
    (pgqueuer's default is 10);
  * LISTEN/NOTIFY wake-ups (always on in pgqueuer), default dequeue_timeout 30 s as fallback poll;
  * `--concurrency C` maps to `max_concurrent_tasks=C`; pgqueuer refuses values below 2*batch_size,
    so C is raised to 2*batch_size (40) in that case (noted in the output). `--concurrency 0` is
    pgqueuer's default: no cap (unlimited concurrent tasks);
  * tables installed with `Durability.durable` (pgqueuer's default: all tables logged).
    `--durability balanced|volatile` uses its documented UNLOGGED options.

Completion: the handler counts invocations; once it has seen N, the script polls the queue
table until it is empty (pgqueuer deletes a finished job from `pgqueuer` and writes the
`pgqueuer_log` row in the same statement, flushed by its status buffer), so the measured time
includes the durable acknowledgement of every job.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.peers.common import (
    BenchResult,
    CpuSampler,
    Stopwatch,
    analyze_table,
    base_parser,
    cancel_hard_timeout,
    drop_unless_kept,
    dsn_url,
    emit,
    install_hard_timeout,
    log,
    package_version,
    percentile,
    recreate_database,
    round_line,
    summarize,
)

DB = "bench_pgqueuer"
ENTRYPOINT = "noop"
PHASE_TIMEOUT = 90.0  # seconds for any one phase (enqueue, drain, latency)
SHUTDOWN_TIMEOUT = 15.0


def parse_args() -> Any:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--driver", choices=["apg", "psy"], default="apg", help="apg = asyncpg (default), psy = psycopg 3")
    p.add_argument(
        "--durability",
        choices=["durable", "balanced", "volatile"],
        default="durable",
        help="pgqueuer table durability (default durable = all tables logged)",
    )
    p.add_argument("--workers", type=int, default=1, help="QueueManagers (each with its own connection), default 1")
    return p.parse_args()


async def connect(driver: str) -> tuple[Any, Any]:
    """Return (raw connection, pgqueuer driver)."""
    if driver == "apg":
        import asyncpg
        from pgqueuer.db import AsyncpgDriver

        conn = await asyncpg.connect(dsn=dsn_url(DB))
        return conn, AsyncpgDriver(conn)
    import psycopg
    from pgqueuer.db import PsycopgDriver

    conn = await psycopg.AsyncConnection.connect(conninfo=dsn_url(DB), autocommit=True)
    return conn, PsycopgDriver(conn)


async def close_quietly(conn: Any) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(conn.close(), 5)


async def count_queue(conn: Any, driver: str) -> int:
    sql = "SELECT count(*) FROM pgqueuer"
    if driver == "apg":
        return int(await conn.fetchval(sql))
    cur = await conn.execute(sql)
    row = await cur.fetchone()
    return int(row[0])


async def count_log_successful(conn: Any, driver: str) -> int:
    sql = "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
    if driver == "apg":
        return int(await conn.fetchval(sql))
    cur = await conn.execute(sql)
    row = await cur.fetchone()
    return int(row[0])


def max_concurrent(args: Any) -> int | None:
    if args.concurrency <= 0:
        return None
    return max(args.concurrency, 2 * args.batch_size)


def install_queries(driver_obj: Any, durability: str) -> Any:
    from pgqueuer.adapters.persistence.qb import QueryBuilderEnvironment
    from pgqueuer.domain.settings import DBSettings, Durability
    from pgqueuer.queries import Queries

    return Queries(driver_obj, qbe=QueryBuilderEnvironment(settings=DBSettings(durability=Durability(durability))))


async def start_workers(args: Any, handler: Any) -> tuple[list[Any], list[Any], list[asyncio.Task[None]]]:
    """Build `--workers` PgQueuer instances; returns (pgqs, conns, run tasks not yet started)."""
    from pgqueuer import PgQueuer

    pgqs, conns = [], []
    for _ in range(args.workers):
        conn, drv = await connect(args.driver)
        pgq = PgQueuer(drv)
        pgq.entrypoint(ENTRYPOINT)(handler)
        pgqs.append(pgq)
        conns.append(conn)
    return pgqs, conns, []


def launch(pgqs: list[Any], args: Any) -> list[asyncio.Task[None]]:
    from datetime import timedelta

    return [
        asyncio.create_task(
            pgq.run(
                batch_size=args.batch_size,
                max_concurrent_tasks=max_concurrent(args),
                dequeue_timeout=timedelta(seconds=30),
            )
        )
        for pgq in pgqs
    ]


async def stop_workers(pgqs: list[Any], tasks: list[asyncio.Task[None]], conns: list[Any]) -> None:
    for pgq in pgqs:
        pgq.shutdown.set()
    if tasks:
        done, pending = await asyncio.wait(tasks, timeout=SHUTDOWN_TIMEOUT)
        for t in pending:
            log("pgqueuer worker did not stop in time; cancelling")
            t.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)
        for t in done:
            if not t.cancelled() and t.exception() is not None:
                log(f"pgqueuer worker ended with {t.exception()!r}")
    for c in conns:
        await close_quietly(c)


async def wait_or_fail(event: asyncio.Event, tasks: list[asyncio.Task[None]], timeout: float, what: str) -> None:
    """Wait for *event*; fail fast if a worker task dies first, or after *timeout*."""
    ev_task = asyncio.create_task(event.wait())
    done, _ = await asyncio.wait([ev_task, *tasks], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    if ev_task not in done:
        ev_task.cancel()
        for t in tasks:
            if t in done:
                raise RuntimeError(f"pgqueuer worker exited during {what}: {t.exception()!r}")
        raise TimeoutError(f"{what} did not finish within {timeout:.0f}s")


async def throughput_round(args: Any, rnd: int) -> dict[str, Any]:
    """One round: fresh database, bulk enqueue N, start worker, time until all N are acknowledged."""
    n = args.jobs
    recreate_database(DB)
    prod_conn, prod_drv = await connect(args.driver)
    try:
        q = install_queries(prod_drv, args.durability)
        await q.install()
        with Stopwatch() as enq:
            # pgqueuer's batch enqueue: list arguments -> one INSERT ... SELECT unnest(...)
            await asyncio.wait_for(q.enqueue([ENTRYPOINT] * n, [b"{}"] * n, [0] * n), PHASE_TIMEOUT)
        if args.analyze:
            analyze_table(DB, "pgqueuer")
        seen = 0
        first_start = 0.0
        all_seen = asyncio.Event()

        async def noop(job: Any) -> None:
            nonlocal seen, first_start
            if not seen:
                first_start = time.perf_counter()
            seen += 1
            if seen >= n:
                all_seen.set()

        pgqs, conns, _ = await start_workers(args, noop)
        tasks: list[asyncio.Task[None]] = []
        try:
            with CpuSampler(DB) as cpu:
                t0 = time.perf_counter()
                tasks = launch(pgqs, args)
                await wait_or_fail(all_seen, tasks, PHASE_TIMEOUT, f"round {rnd} drain")
                deadline = time.monotonic() + 30
                while await count_queue(prod_conn, args.driver) > 0:
                    if time.monotonic() > deadline:
                        raise TimeoutError("jobs ran but were not acknowledged within 30 s")
                    await asyncio.sleep(0.002)
                t1 = time.perf_counter()
        finally:
            await stop_workers(pgqs, tasks, conns)
        ok = await count_log_successful(prod_conn, args.driver)
        if ok != n or seen != n:
            log(f"WARNING round {rnd}: handler saw {seen}, log has {ok} successful, expected {n}")
        return {
            "seconds": t1 - t0,
            "enqueue_s": enq.seconds,
            "startup_s": first_start - t0,
            "steady_rate": (n - 1) / (t1 - first_start) if t1 > first_start else float("nan"),
            **cpu.per_job(n),
            "cpu": cpu.note(),
        }
    finally:
        await close_quietly(prod_conn)


async def latency_phase(args: Any) -> list[float]:
    """Idle worker; enqueue M jobs one at a time, ~gap ms apart; enqueue-call -> handler-start in ms."""
    m = args.latency_jobs
    recreate_database(DB)
    prod_conn, prod_drv = await connect(args.driver)
    lat_ms: list[float] = []
    enq_pc: dict[int, float] = {}
    all_seen = asyncio.Event()
    try:
        q = install_queries(prod_drv, args.durability)
        await q.install()

        async def noop(job: Any) -> None:
            started = time.perf_counter()
            body = json.loads(job.payload)
            i = body["i"]
            # same process, so the monotonic clock is comparable; body["t"] (time.time()) is kept
            # in the payload for cross-process use but perf_counter is the finer measure here.
            lat_ms.append((started - enq_pc[i]) * 1000.0)
            if len(lat_ms) >= m:
                all_seen.set()

        pgqs, conns, _ = await start_workers(args, noop)
        tasks: list[asyncio.Task[None]] = []
        try:
            tasks = launch(pgqs, args)
            await asyncio.sleep(1.0)  # let the worker reach its idle LISTEN wait
            for i in range(m):
                payload = json.dumps({"i": i, "t": time.time()}).encode()
                enq_pc[i] = time.perf_counter()
                await q.enqueue(ENTRYPOINT, payload)
                await asyncio.sleep(args.gap_ms / 1000.0)
            await wait_or_fail(all_seen, tasks, 30, "latency phase")
        finally:
            await stop_workers(pgqs, tasks, conns)
    finally:
        await close_quietly(prod_conn)
    return lat_ms


async def main_async(args: Any) -> list[BenchResult]:
    version = package_version("pgqueuer")
    drv_name = (
        "asyncpg " + package_version("asyncpg") if args.driver == "apg" else "psycopg " + package_version("psycopg")
    )
    mct = max_concurrent(args)
    settings_note = (
        f"batch_size={args.batch_size}, max_concurrent_tasks={mct if mct else 'unlimited'}"
        + (f" (requested {args.concurrency}, pgqueuer needs >= 2*batch)" if mct and mct != args.concurrency else "")
        + f", workers={args.workers}, durability={args.durability}, uvloop, LISTEN/NOTIFY"
    )
    results: list[BenchResult] = []
    if args.jobs > 0 and args.rounds > 0:
        rounds = []
        for r in range(1, args.rounds + 1):
            res = await throughput_round(args, r)
            rounds.append(res)
            log(round_line("pgqueuer", args.jobs, r, res))
        results.append(summarize(f"pgqueuer {version}", f"postgresql+{drv_name}", args, rounds, settings_note))
    if args.latency_jobs > 0:
        with Stopwatch() as sw:
            lat = await latency_phase(args)
        p50, p99 = percentile(lat, 50), percentile(lat, 99)
        log(f"pgqueuer latency: {len(lat)} samples, p50 {p50:.2f} ms, p99 {p99:.2f} ms")
        results.append(
            BenchResult(
                system=f"pgqueuer {version}",
                backend=f"postgresql+{drv_name}",
                jobs=len(lat),
                seconds=sw.seconds,
                jobs_per_s=float("nan"),
                p50_ms=percentile(lat, 50),
                p99_ms=percentile(lat, 99),
                notes=f"latency enqueue->handler start, one job per {args.gap_ms:g} ms on an idle worker "
                f"(max {max(lat):.2f} ms); {settings_note}",
            )
        )
    return results


def main() -> int:
    args = parse_args()
    install_hard_timeout(args.hard_timeout)
    try:
        import uvloop

        results = uvloop.run(main_async(args))
    except ImportError:
        results = asyncio.run(main_async(args))
    finally:
        drop_unless_kept(DB, args.keep_db)
    cancel_hard_timeout()
    emit(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
