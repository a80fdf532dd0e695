"""cProfile in every thread, and per-job CPU by component (``throughput.py --profile``).

cProfile profiles only the thread that enables it, and a chokaq worker spends most of its CPU
outside its event-loop thread (database threads, LISTEN, the sweeper). ``ThreadProfiles`` wraps
``threading.Thread.run`` while it is active, so every thread started inside it (the worker's loop
thread, its ``chokaq-db`` and ``chokaq-job`` pools, any thread a new engine starts) runs under a
``cProfile.Profile`` of its own, timed with ``time.thread_time``: each function's self time is
CPU that this thread spent there, not wall time, so waiting on the database or on a lock costs
nothing and work on other threads is not charged twice. The per-thread profiles are merged when
their threads end.

``components()`` then sums self time ("tottime") by component (ordered rules on the file and
function name, below) and divides by the number of jobs.
"""

from __future__ import annotations

import cProfile
import pstats
import re
import threading
import time
from collections import defaultdict
from typing import Any

# (component, substrings of "file:function"); first match wins, so specific rules come first.
# C functions have the file "~" and a name like "<method 'execute' of 'psycopg_binary.pq.PGconn' objects>".
COMPONENTS: list[tuple[str, tuple[str, ...]]] = [
    ("chokaq row mapping (storage/records.py)", ("chokaq/storage/records.py",)),
    ("chokaq storage (statement building, executor)", ("chokaq/storage/",)),
    (
        "SQLAlchemy Row / result",
        ("sqlalchemy/engine/result.py", "sqlalchemy/engine/row.py", "sqlalchemy/engine/_py_row", "resultproxy"),
    ),
    ("SQLAlchemy execution (connection, pool, compile cache, context)", ("sqlalchemy/", "sqlalchemy.")),
    ("psycopg (adapters, dumpers, cursor, libpq calls)", ("psycopg/", "psycopg_binary", "psycopg.", "psycopg_c")),
    (
        "thread hand-off (executor, futures, locks, queues)",
        (
            "concurrent/futures/",
            "threading.py",
            "queue.py",
            "call_soon_threadsafe",
            "run_in_executor",
            "wrap_future",
            "_chain_future",
            # asyncio's side of a run_in_executor future: copying the result back onto the loop
            "futures.py:_set_state",
            "futures.py:_call_set_state",
            "futures.py:_copy_future_state",
            "futures.py:_set_concurrent_future_state",
            "futures.py:_call_check_cancel",
            "_thread.",
            "_queue.",
        ),
    ),
    ("asyncio loop, tasks, timers", ("asyncio/", "_asyncio.", "select.epoll", "uvloop", "selectors.py")),
    ("chokaq runtime (claim, per-job launch and execute, outcomes)", ("chokaq/runtime/",)),
    ("chokaq other (domain, settings, telemetry)", ("chokaq/",)),
    ("json / pydantic", ("json/", "_json.", "pydantic")),
    ("logging", ("logging/",)),
    ("the benchmark itself (handler, poller)", ("benchmarks/",)),
]
OTHER = "other (stdlib, builtins)"
_THREAD_NUMBER = re.compile(r"[_-]?\d+$")


def component(key: tuple[str, int, str]) -> str:
    filename, _line, func = key
    where = f"{filename.replace(chr(92), '/')}:{func}"
    for name, needles in COMPONENTS:
        if any(n in where for n in needles):
            return name
    return OTHER


class ThreadProfiles:
    """``with ThreadProfiles() as tp: ...`` profiles every thread started inside; ``tp.stats()`` merges them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: list[tuple[str, cProfile.Profile]] = []
        self._started: list[threading.Thread] = []
        self._orig_run: Any = None

    def __enter__(self) -> ThreadProfiles:
        orig = self._orig_run = threading.Thread.run
        profiles = self

        def run(thread: threading.Thread) -> None:
            prof = cProfile.Profile(time.thread_time)
            with profiles._lock:
                profiles._started.append(thread)
            prof.enable()
            try:
                orig(thread)
            finally:
                prof.disable()
                with profiles._lock:
                    profiles._done.append((thread.name, prof))

        threading.Thread.run = run  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        threading.Thread.run = self._orig_run  # type: ignore[method-assign]

    def join(self, timeout: float = 10.0) -> list[str]:
        """Wait for the profiled threads to end; the names of those still running (not counted)."""
        deadline = time.monotonic() + timeout
        for t in list(self._started):
            t.join(max(0.0, deadline - time.monotonic()))
        return [t.name for t in self._started if t.is_alive()]

    def stats(self) -> pstats.Stats | None:
        with self._lock:
            profs = [p for _, p in self._done]
        if not profs:
            return None
        merged = pstats.Stats(profs[0])
        for p in profs[1:]:
            merged.add(p)
        return merged

    def seconds_by_thread(self) -> dict[str, float]:
        """Profiled CPU seconds per thread family ("chokaq-db", "chokaq-job", "Thread (run)", ...)."""
        out: dict[str, float] = defaultdict(float)
        with self._lock:
            done = list(self._done)
        for name, prof in done:
            st = pstats.Stats(prof)
            out[_THREAD_NUMBER.sub("", name)] += sum(v[2] for v in st.stats.values())  # type: ignore[attr-defined]
        return dict(out)


def components(stats: pstats.Stats) -> dict[str, float]:
    """Self CPU seconds by component.

    A function that no rule claims (a builtin such as ``list.append`` or ``isinstance``, or a stdlib
    helper such as ``re`` or ``enum``) is charged to the components of its direct callers, in
    proportion to the time it spent under each caller: ``re.Pattern.search`` called by psycopg's
    list dumper is psycopg's cost. What is still unclaimed after that one level stays in "other".
    """
    out: dict[str, float] = defaultdict(float)
    for key, (_cc, _nc, tottime, _ct, callers) in stats.stats.items():  # type: ignore[attr-defined]
        name = component(key)
        if name != OTHER or not callers:
            out[name] += tottime
            continue
        for caller, (_ccc, _cnc, caller_tt, _cct) in callers.items():
            out[component(caller)] += caller_tt
        out[OTHER] += max(0.0, tottime - sum(v[2] for v in callers.values()))
    return dict(out)


def top_functions(stats: pstats.Stats, limit: int = 15) -> list[tuple[str, float, int]]:
    """(function, self CPU seconds, calls) of the most expensive functions by self time."""
    rows = [
        (f"{_short(fn)}:{line}({func})", value[2], value[1])
        for (fn, line, func), value in stats.stats.items()  # type: ignore[attr-defined]
    ]
    return sorted(rows, key=lambda r: -r[1])[:limit]


_PREFIX = re.compile(r"^.*(?:site-packages/|/lib/python3\.\d+/|/work/[^/]+/)")


def _short(filename: str) -> str:
    return _PREFIX.sub("", filename.replace("\\", "/"))


def report(tp: ThreadProfiles, n: int, process_cpu_us: float, reference_cpu_us: float | None) -> list[str]:
    """The lines ``throughput.py --profile`` prints: components, threads and top functions, in us per job."""
    stats = tp.stats()
    if stats is None:
        return ["no profiled thread finished: nothing to report"]
    comps = components(stats)
    total = sum(comps.values())
    scale = (reference_cpu_us / (total / n * 1e6)) if reference_cpu_us and total else None
    lines = [
        f"profiled CPU in the worker's threads: {total / n * 1e6:.1f} us/job; whole process under the profiler "
        f"{process_cpu_us:.1f} us/job"
        + (
            f"; unprofiled round {reference_cpu_us:.1f} us/job (so 'est.' = profiled share x unprofiled CPU)"
            if reference_cpu_us
            else ""
        ),
        "",
        f"{'component':<66} {'us/job':>8} {'share':>6}" + (f" {'est. us':>8}" if scale else ""),
    ]
    for name, secs in sorted(comps.items(), key=lambda kv: -kv[1]):
        us = secs / n * 1e6
        lines.append(f"{name:<66} {us:8.1f} {secs / total:6.1%}" + (f" {us * scale:8.1f}" if scale else ""))
    lines += ["", f"{'thread':<40} {'us/job':>8}"]
    for name, secs in sorted(tp.seconds_by_thread().items(), key=lambda kv: -kv[1]):
        lines.append(f"{name:<40} {secs / n * 1e6:8.1f}")
    lines += ["", f"{'top functions by self CPU':<90} {'us/job':>8} {'calls/job':>9}"]
    for func, secs, calls in top_functions(stats):
        lines.append(f"{func[:90]:<90} {secs / n * 1e6:8.2f} {calls / n:9.2f}")
    return lines
