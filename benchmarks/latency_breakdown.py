"""Where chokaq's enqueue -> start latency goes on PostgreSQL, step by step (median per step).

The latency phase of throughput.py (an idle worker, a separate producer app, one job per gap),
with a timestamp at each hand-over: the enqueue call returns, the LISTEN thread hears the NOTIFY,
the worker's loop is poked, the claim starts and ends in its database thread, the handlers are
launched, the handler starts. A step that grows is where a latency regression is.

    .venv/bin/python benchmarks/latency_breakdown.py [--samples 200] [--gap-ms 20]

It wraps a few of chokaq's internal functions (the LISTEN callback, Fetcher.poke,
Storage.fetch, Starter.launch, Execution._run_handler), so it measures this checkout only; the
wrappers cost a few µs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STEPS = ["enqueue returned", "NOTIFY heard", "loop poked", "claim sent", "claim answered", "launched", "handler"]
# Marks go to the job enqueued last: one job at a time, each started well within the gap before the
# next is enqueued (the p99 is far below the default 20 ms gap), so that is the job being measured.


def install(marks: dict[int, dict[str, float]], current: list[int | None]) -> None:
    """Wrap the hand-over points; each records the first time it is reached for the current job."""
    import chokaq.runtime.worker as worker_mod
    from chokaq import ChokaQ
    from chokaq.runtime.execution import Execution
    from chokaq.runtime.fetching import Fetcher
    from chokaq.runtime.starting import Starter
    from chokaq.storage import Storage

    def mark(step: str) -> None:
        if current[0] is not None:
            marks.setdefault(current[0], {}).setdefault(step, time.perf_counter())

    listen, poke, fetch, launch, run_handler, enqueue = (
        worker_mod.listen,
        Fetcher.poke,
        Storage.fetch,
        Starter.launch,
        Execution._run_handler,
        ChokaQ.enqueue,
    )

    def listen_marked(url: str, on_notify: Any, stop: Any, listening: Any) -> None:
        def heard() -> None:
            mark("NOTIFY heard")
            on_notify()

        listen(url, heard, stop, listening)

    def poke_marked(self: Any) -> None:
        mark("loop poked")
        poke(self)

    def fetch_marked(self: Any, *a: Any, **k: Any) -> Any:
        mark("claim sent")
        jobs = fetch(self, *a, **k)
        if jobs:
            mark("claim answered")
        return jobs

    def launch_marked(self: Any, started: Any) -> None:
        mark("launched")
        launch(self, started)

    async def run_handler_marked(self: Any, run: Any, handler: Any, span: Any) -> Any:
        mark("handler")
        return await run_handler(self, run, handler, span)

    def enqueue_marked(self: Any, type: str, payload: Any = None, **k: Any) -> str:
        current[0] = payload["i"]
        marks.setdefault(payload["i"], {})["start"] = time.perf_counter()
        job_id = enqueue(self, type, payload, **k)
        mark("enqueue returned")
        return job_id

    worker_mod.listen = listen_marked  # type: ignore[assignment]  # the name the worker starts its thread with
    Fetcher.poke = poke_marked  # type: ignore[method-assign]
    Storage.fetch = fetch_marked  # type: ignore[method-assign]
    Starter.launch = launch_marked  # type: ignore[method-assign]
    Execution._run_handler = run_handler_marked  # type: ignore[method-assign]
    ChokaQ.enqueue = enqueue_marked  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--gap-ms", type=float, default=20.0)
    ap.add_argument("--concurrency", type=int, default=40)
    args = ap.parse_args()

    marks: dict[int, dict[str, float]] = {}
    current: list[int | None] = [None]
    install(marks, current)
    from benchmarks.calibration import calibrate
    from benchmarks.throughput import latency_phase

    calib = calibrate()[0]
    lat, _ = latency_phase("postgres", args.samples, args.concurrency, 20, args.gap_ms, "separate")
    print(
        f"{len(lat)} samples, enqueue -> handler start p50 {statistics.median(lat):.2f} ms; calibration {calib:.0f} ms"
    )
    previous = "start"
    for step in STEPS:
        gaps = [(m[step] - m[previous]) * 1000 for m in marks.values() if step in m and previous in m]
        median = f"{statistics.median(gaps):6.3f} ms" if gaps else "     - (never reached)"
        print(f"  {previous:>16} -> {step:<16} p50 {median}  ({len(gaps)} samples)")
        previous = step


if __name__ == "__main__":
    main()
