"""procrastinate side of the peer benchmark: no-op throughput and enqueue->start latency.

Run from the repo root with the bench venv:

    .venv-bench/bin/python benchmarks/peers/procrastinate_bench.py --jobs 5000 --concurrency 10 --rounds 3

Worker setup follows procrastinate's docs ("Launch a worker", "Execute multiple jobs at the
same time", "Batch defer"):
  * `App(connector=PsycopgConnector(...))` -- psycopg 3 async pool, procrastinate's recommended
    (and only non-deprecated async) connector;
  * `await app.run_worker_async(concurrency=C, install_signal_handlers=False)` inside
    `app.open_async()` (the documented in-application form of `procrastinate worker --concurrency C`);
  * `listen_notify=True` (default) so a worker wakes on job insertion; the 5 s
    fetch_job_polling_interval is only the fallback;
  * async `noop` task; bulk enqueue with `Task.batch_defer_async` (one INSERT for all jobs);
  * `delete_jobs` left at its default (`never`: finished rows stay with status `succeeded`).
  * procrastinate has **no fetch batch / prefetch option**: the worker fetches one job per
    `procrastinate_fetch_job_v2()` call, one at a time, into free concurrency slots.
    `--batch-size` is therefore ignored here (recorded in the notes).
  * psycopg_pool's default size is min 4 / max 4 connections; with concurrency C the pool is
    sized max(4, C + 2) so that every slot can acknowledge its job without queuing for a
    connection (`--pool-size` overrides). LISTEN uses its own dedicated connection.
  * default asyncio event loop (procrastinate's CLI does not use uvloop).

Completion: the task counts invocations; once it has seen N, the script polls
`procrastinate_jobs` until N rows have status 'succeeded', so the measured time includes the
acknowledgement (`procrastinate_finish_job`) of every job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
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
    conninfo,
    drop_database,
    emit,
    install_hard_timeout,
    log,
    package_version,
    percentile,
    recreate_database,
    round_line,
    summarize,
)

DB = "bench_procrastinate"
PHASE_TIMEOUT = 100.0
SHUTDOWN_TIMEOUT = 15.0


def parse_args() -> Any:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--pool-size", type=int, default=0, help="psycopg pool size (default max(4, concurrency + 2))")
    p.add_argument("--workers", type=int, default=1, help="worker instances in this process, default 1")
    return p.parse_args()


def pool_size(args: Any) -> int:
    return args.pool_size or max(4, args.concurrency + 2)


def make_app(args: Any) -> tuple[Any, dict[str, Any]]:
    """A fresh App with `noop` and `lat` tasks; the handlers report into the returned state dict."""
    import procrastinate

    n = pool_size(args) * max(1, args.workers)
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=conninfo(DB), min_size=n, max_size=n),
    )
    state: dict[str, Any] = {
        "seen": 0,
        "target": 0,
        "event": asyncio.Event(),
        "lat_ms": [],
        "enq_pc": {},
        "first_start": 0.0,
    }

    @app.task(name="noop")
    async def noop() -> None:
        if not state["seen"]:
            state["first_start"] = time.perf_counter()
        state["seen"] += 1
        if state["seen"] >= state["target"]:
            state["event"].set()

    @app.task(name="lat")
    async def lat(i: int, t: float) -> None:
        started = time.perf_counter()
        # same process: compare monotonic clocks; `t` (time.time()) rides in the payload as well
        state["lat_ms"].append((started - state["enq_pc"][i]) * 1000.0)
        if len(state["lat_ms"]) >= state["target"]:
            state["event"].set()

    state["noop"] = noop
    state["lat"] = lat
    return app, state


def launch(app: Any, args: Any) -> list[asyncio.Task[None]]:
    return [
        asyncio.create_task(
            app.run_worker_async(
                concurrency=args.concurrency,
                install_signal_handlers=False,
                listen_notify=True,
                wait=True,
                name=f"bench-{k}",
            )
        )
        for k in range(args.workers)
    ]


async def stop_workers(tasks: list[asyncio.Task[None]]) -> None:
    """Documented graceful stop: cancel the run_worker_async task, then wait for it."""
    for t in tasks:
        t.cancel()
    if not tasks:
        return
    done, pending = await asyncio.wait(tasks, timeout=SHUTDOWN_TIMEOUT)
    if pending:
        log(f"{len(pending)} procrastinate worker(s) did not stop within {SHUTDOWN_TIMEOUT:.0f}s")
    for t in done:
        if not t.cancelled() and t.exception() is not None:
            log(f"procrastinate worker ended with {t.exception()!r}")


async def wait_or_fail(event: asyncio.Event, tasks: list[asyncio.Task[None]], timeout: float, what: str) -> None:
    ev_task = asyncio.create_task(event.wait())
    done, _ = await asyncio.wait([ev_task, *tasks], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    if ev_task not in done:
        ev_task.cancel()
        for t in tasks:
            if t in done:
                exc = None if t.cancelled() else t.exception()
                raise RuntimeError(f"procrastinate worker exited during {what}: {exc!r}")
        raise TimeoutError(f"{what} did not finish within {timeout:.0f}s")


async def count_succeeded(app: Any) -> int:
    row = await app.connector.execute_query_one_async(
        "SELECT count(*) AS n FROM procrastinate_jobs WHERE status = 'succeeded'"
    )
    return int(row["n"])


async def throughput_round(args: Any, rnd: int) -> dict[str, Any]:
    n = args.jobs
    recreate_database(DB)
    app, state = make_app(args)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        with Stopwatch() as enq:
            await asyncio.wait_for(state["noop"].batch_defer_async(*({} for _ in range(n))), PHASE_TIMEOUT)
        if args.analyze:
            analyze_table(DB, "procrastinate_jobs")
        state["target"] = n
        tasks: list[asyncio.Task[None]] = []
        try:
            with CpuSampler(DB) as cpu:
                t0 = time.perf_counter()
                tasks = launch(app, args)
                await wait_or_fail(state["event"], tasks, PHASE_TIMEOUT, f"round {rnd} drain")
                deadline = time.monotonic() + 30
                while await count_succeeded(app) < n:
                    if time.monotonic() > deadline:
                        raise TimeoutError("jobs ran but were not acknowledged within 30 s")
                    await asyncio.sleep(0.002)
                t1 = time.perf_counter()
        finally:
            await stop_workers(tasks)
        ok = await count_succeeded(app)
        if ok != n or state["seen"] != n:
            log(f"WARNING round {rnd}: task saw {state['seen']}, table has {ok} succeeded, expected {n}")
    first = state["first_start"]
    return {
        "seconds": t1 - t0,
        "enqueue_s": enq.seconds,
        "startup_s": first - t0,
        "steady_rate": (n - 1) / (t1 - first) if t1 > first else float("nan"),
        **cpu.per_job(n),
        "cpu": cpu.note(),
    }


async def latency_phase(args: Any) -> list[float]:
    m = args.latency_jobs
    recreate_database(DB)
    app, state = make_app(args)
    state["target"] = m
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        tasks: list[asyncio.Task[None]] = []
        try:
            tasks = launch(app, args)
            await asyncio.sleep(1.0)  # idle worker, LISTENing
            for i in range(m):
                t = time.time()
                state["enq_pc"][i] = time.perf_counter()
                await state["lat"].defer_async(i=i, t=t)
                await asyncio.sleep(args.gap_ms / 1000.0)
            await wait_or_fail(state["event"], tasks, 30, "latency phase")
        finally:
            await stop_workers(tasks)
    return list(state["lat_ms"])


async def main_async(args: Any) -> list[BenchResult]:
    version = package_version("procrastinate")
    backend = "postgresql+psycopg " + package_version("psycopg")
    note = (
        f"concurrency={args.concurrency}, workers={args.workers}, pool={pool_size(args)}, "
        f"no fetch batching (one job per fetch; --batch-size {args.batch_size} not applicable), "
        "listen_notify=True, delete_jobs=never, asyncio loop"
    )
    results: list[BenchResult] = []
    if args.jobs > 0 and args.rounds > 0:
        rounds = []
        for r in range(1, args.rounds + 1):
            res = await throughput_round(args, r)
            rounds.append(res)
            log(round_line("procrastinate", args.jobs, r, res))
        results.append(summarize(f"procrastinate {version}", backend, args, rounds, note))
    if args.latency_jobs > 0:
        with Stopwatch() as sw:
            lat = await latency_phase(args)
        log(
            f"procrastinate latency: {len(lat)} samples, p50 {percentile(lat, 50):.2f} ms, "
            f"p99 {percentile(lat, 99):.2f} ms"
        )
        results.append(
            BenchResult(
                system=f"procrastinate {version}",
                backend=backend,
                jobs=len(lat),
                seconds=sw.seconds,
                jobs_per_s=float("nan"),
                p50_ms=percentile(lat, 50),
                p99_ms=percentile(lat, 99),
                notes=f"latency enqueue->task start, one job per {args.gap_ms:g} ms on an idle worker "
                f"(max {max(lat):.2f} ms); {note}",
            )
        )
    return results


def main() -> int:
    args = parse_args()
    # procrastinate logs two INFO records per job; keep them off the console like a
    # production worker at WARNING level would.
    logging.basicConfig(level=logging.WARNING)
    # The "App is instantiated in the main Python module" warning is about task-name lookup for
    # `__main__`; every task here has an explicit name, so it does not apply.
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    install_hard_timeout(args.hard_timeout)
    try:
        results = asyncio.run(main_async(args))
    finally:
        if not args.keep_db:
            with contextlib.suppress(Exception):
                drop_database(DB)
    cancel_hard_timeout()
    emit(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
