"""What one thread hand-off costs on this machine: the worker runs each database call of its hot
path in a thread (``Worker._db``: ``loop.run_in_executor``), and an asyncio loop alone would not.

    .venv/bin/python benchmarks/handoff_cost.py [--calls 5000]

Prints, per round trip, the process's CPU and the wall time of: a no-op function run through
``run_in_executor`` from an event loop (uvloop when installed, as the benchmarks run the worker;
``Execution.EventLoop`` defaults to asyncio),
and a bare ping-pong between two threads over ``queue.SimpleQueue``. No database is involved.
Multiply by the hot path's calls per job (claims, moves, starts, heartbeats; on PostgreSQL one
statement each, as ``throughput.py`` counts them) for the share of a job's CPU that the
hand-offs take.
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor


def noop() -> int:
    return 1


async def executor_round_trips(calls: int) -> tuple[float, float]:
    """(CPU µs, wall µs) per ``run_in_executor`` of a no-op, after a warm-up."""
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=6) as pool:  # as many threads as Worker._db_pool
        for _ in range(200):
            await loop.run_in_executor(pool, noop)
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(calls):
            await loop.run_in_executor(pool, noop)
        return (time.process_time() - cpu) / calls * 1e6, (time.perf_counter() - wall) / calls * 1e6


def thread_ping_pong(calls: int) -> tuple[float, float]:
    """(CPU µs, wall µs) per round trip between two threads over SimpleQueue, after a warm-up."""
    there: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    back: queue.SimpleQueue[int] = queue.SimpleQueue()

    def echo() -> None:
        while (item := there.get()) is not None:
            back.put(item)

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    for _ in range(200):
        there.put(1)
        back.get()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(calls):
        there.put(1)
        back.get()
    result = (time.process_time() - cpu) / calls * 1e6, (time.perf_counter() - wall) / calls * 1e6
    there.put(None)
    thread.join()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=5000)
    args = ap.parse_args()
    try:
        import uvloop

        run, loop_name = uvloop.run, "uvloop"
    except ImportError:
        run, loop_name = asyncio.run, "asyncio"
    cpu, wall = run(executor_round_trips(args.calls))
    print(f"run_in_executor from {loop_name}: {cpu:.1f} µs CPU, {wall:.1f} µs wall per round trip")
    cpu, wall = thread_ping_pong(args.calls)
    print(f"thread ping-pong (SimpleQueue): {cpu:.1f} µs CPU, {wall:.1f} µs wall per round trip")


if __name__ == "__main__":
    main()
