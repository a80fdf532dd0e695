"""What one journaled step costs (docs/steps.md): ``await ctx.step(name, fn)`` writes its start and
its end, each one fenced statement awaited before the handler goes on.

    .venv/bin/python benchmarks/step_cost.py [--steps 2000] [--pg postgresql+psycopg://...]

Runs one job's steps through the same calls a worker's handler makes (``ctx.step`` on a
``JobContext`` with the worker's store: its database threads) against a SQLite file and, when
given, PostgreSQL, and prints per step: statements sent, wall µs, and the process's CPU µs. The
journal's one read (at the run's first step) is counted apart.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from sqlalchemy import event

from chokaq.domain.models import EnqueueRequest
from chokaq.runtime.handlers import JobContext
from chokaq.storage import Storage


def measure(url: str, steps: int) -> dict[str, float]:
    storage = Storage(url)
    storage.upgrade()
    per_job = 500  # under MAX_STEPS_PER_JOB: the steps are spread over several jobs
    jobs = [storage.enqueue(EnqueueRequest(type="bench"))[0] for _ in range(-(-steps // per_job))]
    started = storage.start("bench-worker", storage.fetch("bench-worker", len(jobs))).started
    store = storage.for_worker("bench-worker")
    sent = [0]

    def count(*_: object) -> None:
        sent[0] += 1

    event.listen(storage.engine, "before_cursor_execute", count)

    async def run() -> tuple[int, float, float, int]:
        contexts = [
            JobContext(
                job_id=r.id,
                attempt=r.attempt_count,
                queue="default",
                type="bench",
                worker_id="bench-worker",
                _store=store,
            )
            for r in started
        ]
        sent[0] = 0
        for ctx in contexts:
            await ctx.step("warm-up", _noop)  # each run's first step reads its journal once
        first = sent[0] // len(contexts)
        sent[0] = 0
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(steps):
            await contexts[i // per_job].step(f"step-{i}", _noop)
        return sent[0], time.process_time() - cpu, time.perf_counter() - wall, first

    try:
        n, cpu, wall, first = asyncio.run(run())
    finally:
        store.close()
        storage.close()
    return {"statements": n / steps, "wall_us": wall / steps * 1e6, "cpu_us": cpu / steps * 1e6,
            "first_step_statements": first}  # fmt: skip


async def _noop() -> None:
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--pg", default="", help="a PostgreSQL URL (an empty database is fine)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        targets = [("sqlite", f"sqlite:///{Path(tmp) / 'steps.db'}")] + ([("postgresql", args.pg)] if args.pg else [])
        for name, url in targets:
            r = measure(url, args.steps)
            print(
                f"{name:<10} per step: {r['statements']:.2f} statements, {r['wall_us']:.0f} µs wall, "
                f"{r['cpu_us']:.0f} µs CPU (the run's first step: {r['first_step_statements']:.0f} statements)"
            )


if __name__ == "__main__":
    main()
