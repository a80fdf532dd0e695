"""oban-py side of the peer benchmark: no-op throughput and enqueue->start latency.

Run from the repo root with oban's own venv (oban needs Python >= 3.12; `make bench-oban-venv`):

    .venv-bench-oban/bin/python benchmarks/peers/oban_bench.py --jobs 5000 --concurrency 40 --rounds 3

Setup follows oban-py 0.7.0's README ("embed in your application") and what its own `oban start`
command does, with every default left as shipped:
  * `pool = await Oban.create_pool(dsn)`: psycopg 3 `AsyncConnectionPool`, oban's defaults
    (min 1, max 10 connections, no connection check);
  * `oban.schema.install(pool)`: oban's own schema installer (tables, enum, indexes, insert trigger);
  * `Oban(pool=pool, queues={"default": C})`: one queue, local limit C; leadership, stager
    (1 s), lifeline, pruner, refresher and the PostgreSQL notifier at their defaults;
  * uvloop (`uvloop.run`, as `oban start` does) and orjson as psycopg's JSON dumps/loads
    (`set_json_dumps(orjson.dumps)`, `set_json_loads(orjson.loads)`, as `oban start` does);
  * an async no-op `@worker(queue="default")` class;
  * bulk enqueue with `Oban.enqueue_many(jobs)`, oban's batch API (in the open-source edition it
    runs one INSERT per job inside one transaction; Oban Pro's bulk insert is not available);
  * oban has **no fetch batch size**: a producer fetches `limit - running` jobs per fetch, so
    `--batch-size` does not apply (recorded in the notes), and `--concurrency` is the queue limit.

Completion: the worker counts invocations; once it has seen N, the script polls `oban_jobs` until
no row is left outside the `completed` state (oban acknowledges each job with its own UPDATE,
batched per producer loop, and keeps the row), so the measured time includes the durable
acknowledgement of every job.
"""

from __future__ import annotations

import asyncio
import contextlib
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

DB = "bench_oban"
QUEUE = "default"
PHASE_TIMEOUT = 90.0  # seconds for any one phase (enqueue, drain, latency)
ACK_TIMEOUT = 30.0


class Seen:
    """What the no-op worker has seen in the current phase (the worker class is module level, as oban wants)."""

    count = 0
    target = 0
    first = 0.0
    latencies: list[float] = []  # reset per phase by reset()
    enqueued_at: dict[int, float] = {}
    done: asyncio.Event | None = None

    @classmethod
    def reset(cls, target: int) -> None:
        cls.count, cls.target, cls.first = 0, target, 0.0
        cls.latencies, cls.enqueued_at = [], {}
        cls.done = asyncio.Event()

    @classmethod
    def saw(cls) -> None:
        if not cls.count:
            cls.first = time.perf_counter()
        cls.count += 1
        if cls.count >= cls.target and cls.done is not None:
            cls.done.set()


def define_workers() -> tuple[Any, Any]:
    """The no-op and latency workers, defined after oban is imported (it lives only in its own venv)."""
    from oban import worker

    @worker(queue=QUEUE)
    class NoopWorker:
        async def process(self, job: Any) -> None:
            Seen.saw()

    @worker(queue=QUEUE)
    class LatencyWorker:
        async def process(self, job: Any) -> None:
            started = time.perf_counter()
            # same process, so the monotonic clock is comparable with the one taken before enqueue
            Seen.latencies.append((started - Seen.enqueued_at[job.args["i"]]) * 1000.0)
            Seen.saw()

    return NoopWorker, LatencyWorker


def parse_args() -> Any:
    p = base_parser(__doc__.splitlines()[0])
    p.set_defaults(concurrency=40)
    return p.parse_args()


def use_orjson() -> None:
    """psycopg's JSON (de)serialisation through orjson, as `oban start` sets it up."""
    import orjson
    from psycopg.types.json import set_json_dumps, set_json_loads

    set_json_dumps(orjson.dumps)
    set_json_loads(orjson.loads)


async def open_oban(concurrency: int) -> tuple[Any, Any]:
    """(pool, Oban) on a freshly installed schema; the instance is not started yet."""
    from oban import Oban
    from oban.schema import install

    recreate_database(DB)
    pool = await Oban.create_pool(dsn_url(DB))
    await install(pool)
    return pool, Oban(pool=pool, queues={QUEUE: concurrency})


async def unfinished(conn: Any) -> int:
    cur = await conn.execute("SELECT count(*) FROM oban_jobs WHERE state <> 'completed'")
    row = await cur.fetchone()
    return int(row[0])


async def wait_acknowledged(conn: Any) -> None:
    deadline = time.monotonic() + ACK_TIMEOUT
    while await unfinished(conn) > 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"jobs ran but were not acknowledged within {ACK_TIMEOUT:.0f} s")
        await asyncio.sleep(0.002)


async def stop_quietly(oban: Any, pool: Any) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(oban.stop(), 20)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(pool.close(), 5)


async def throughput_round(args: Any, rnd: int, noop: Any) -> dict[str, Any]:
    """One round: fresh database, bulk enqueue N, start oban, time until all N are acknowledged."""
    import psycopg

    n = args.jobs
    pool, oban = await open_oban(args.concurrency)
    poller = await psycopg.AsyncConnection.connect(dsn_url(DB), autocommit=True)
    try:
        with Stopwatch() as enq:
            await asyncio.wait_for(oban.enqueue_many(noop.new({}) for _ in range(n)), PHASE_TIMEOUT)
        if args.analyze:
            analyze_table(DB, "oban_jobs")
        Seen.reset(n)
        assert Seen.done is not None
        with CpuSampler(DB) as cpu:
            t0 = time.perf_counter()
            await oban.start()
            await asyncio.wait_for(Seen.done.wait(), PHASE_TIMEOUT)
            await wait_acknowledged(poller)
            t1 = time.perf_counter()
    finally:
        await stop_quietly(oban, pool)
        await poller.close()
    if Seen.count != n:
        log(f"WARNING round {rnd}: worker saw {Seen.count}, expected {n}")
    first = Seen.first
    return {
        "seconds": t1 - t0,
        "enqueue_s": enq.seconds,
        "startup_s": first - t0,
        "steady_rate": (n - 1) / (t1 - first) if t1 > first else float("nan"),
        **cpu.per_job(n),
        "cpu": cpu.note(),
    }


async def latency_phase(args: Any, lat_worker: Any) -> list[float]:
    """Idle oban; enqueue M jobs one at a time with `oban.enqueue`, ~gap ms apart; enqueue -> start in ms."""
    m = args.latency_jobs
    pool, oban = await open_oban(args.concurrency)
    Seen.reset(m)
    assert Seen.done is not None
    try:
        await oban.start()
        await asyncio.sleep(1.0)  # let the notifier reach its idle LISTEN wait
        for i in range(m):
            job = lat_worker.new({"i": i, "t": time.time()})
            Seen.enqueued_at[i] = time.perf_counter()
            await oban.enqueue(job)
            await asyncio.sleep(args.gap_ms / 1000.0)
        await asyncio.wait_for(Seen.done.wait(), 30)
    finally:
        await stop_quietly(oban, pool)
    return list(Seen.latencies)


def settings_note(args: Any) -> str:
    return (
        f"queue limit {args.concurrency} (no fetch batch size in oban: it fetches limit - running), pool "
        "min 1/max 10 (Oban.create_pool defaults), uvloop, orjson, leadership/stager/lifeline/pruner defaults"
    )


async def main_async(args: Any) -> list[BenchResult]:
    use_orjson()
    noop, lat_worker = define_workers()
    name = f"oban-py {package_version('oban')}"
    backend = f"postgresql+psycopg {package_version('psycopg')}"
    results: list[BenchResult] = []
    if args.jobs > 0 and args.rounds > 0:
        rounds = []
        for r in range(1, args.rounds + 1):
            res = await throughput_round(args, r, noop)
            rounds.append(res)
            log(round_line("oban-py", args.jobs, r, res))
        results.append(summarize(name, backend, args, rounds, settings_note(args)))
    if args.latency_jobs > 0:
        with Stopwatch() as sw:
            lat = await latency_phase(args, lat_worker)
        p50, p99 = percentile(lat, 50), percentile(lat, 99)
        log(f"oban-py latency: {len(lat)} samples, p50 {p50:.2f} ms, p99 {p99:.2f} ms")
        results.append(
            BenchResult(
                system=name,
                backend=backend,
                jobs=len(lat),
                seconds=sw.seconds,
                jobs_per_s=float("nan"),
                p50_ms=p50,
                p99_ms=p99,
                notes=f"latency enqueue->worker start, one job per {args.gap_ms:g} ms on an idle queue "
                f"(max {max(lat):.2f} ms); {settings_note(args)}",
            )
        )
    return results


def main() -> int:
    args = parse_args()
    install_hard_timeout(args.hard_timeout)
    import uvloop  # an oban dependency; `oban start` runs on it

    try:
        results = uvloop.run(main_async(args))
    finally:
        drop_unless_kept(DB, args.keep_db)
    cancel_hard_timeout()
    emit(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
