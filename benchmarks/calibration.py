"""A fixed pure-Python workload, timed before every benchmark round.

The shared 2-core machine changes speed by 2x within minutes (other sessions' test suites, CPU
steal). A round that was slow because the machine was slow shows a slow calibration beside it; a
round that was slow on its own does not. The workload is dict and str work of the kind a job
queue's Python does (formatting keys, dict lookups and updates), fixed in size, so its time on one
machine moves only with the machine: about 0.2 s when the machine is quiet.

``calibrate()`` returns wall milliseconds (what contention slows down) and CPU milliseconds (what
only a slower core or CPU steal slows down); wall much above CPU means other processes had the core.
"""

from __future__ import annotations

import time

ITERATIONS = 800_000  # ~0.2 s of CPU on the 2-core development machine (AMD EPYC, Python 3.11)


def workload(iterations: int = ITERATIONS) -> int:
    """The fixed workload; returns a checksum so the work cannot be optimised away."""
    table: dict[str, int] = {}
    total = 0
    for i in range(iterations):
        key = f"job-{i % 997}:{i & 7}"
        table[key] = table.get(key, 0) + i
        total += len(key)
    return total + sum(table.values()) % 1_000_003


def calibrate(iterations: int = ITERATIONS) -> tuple[float, float]:
    """(wall ms, CPU ms) of one run of the workload."""
    w0, c0 = time.perf_counter(), time.process_time()
    workload(iterations)
    return (time.perf_counter() - w0) * 1000.0, (time.process_time() - c0) * 1000.0
