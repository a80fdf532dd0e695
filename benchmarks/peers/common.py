"""Shared helpers for the peer benchmarks (pgqueuer, procrastinate, database baseline).

These scripts run in their own virtualenv (``.venv-bench``), never in chokaq's, so this
module imports nothing from chokaq and only psycopg 3 from the third-party world.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

from benchmarks.peers.server_cpu import read_server_cpu

# Admin connection: the `test` database, used only to drop/create the per-peer databases.
PG_HOST = os.environ.get("BENCH_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("BENCH_PG_PORT", "5432"))
PG_USER = os.environ.get("BENCH_PG_USER", "postgres")
PG_PASSWORD = os.environ.get("BENCH_PG_PASSWORD", "")
PG_ADMIN_DB = os.environ.get("BENCH_PG_ADMIN_DB", "test")


def conninfo(dbname: str) -> str:
    """libpq key/value connection string for *dbname* (works for psycopg and pgbench)."""
    parts = [f"host={PG_HOST}", f"port={PG_PORT}", f"user={PG_USER}", f"dbname={dbname}"]
    if PG_PASSWORD:
        parts.append(f"password={PG_PASSWORD}")
    return " ".join(parts)


def dsn_url(dbname: str) -> str:
    """postgresql:// URL for *dbname* (what asyncpg wants)."""
    auth = PG_USER + (f":{PG_PASSWORD}" if PG_PASSWORD else "")
    return f"postgresql://{auth}@{PG_HOST}:{PG_PORT}/{dbname}"


def recreate_database(dbname: str) -> None:
    """Drop (forcing off any leftover session) and create *dbname*, via the admin database."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(conninfo(PG_ADMIN_DB), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))


def drop_database(dbname: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(conninfo(PG_ADMIN_DB), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))


def drop_unless_kept(dbname: str, keep: bool) -> None:
    """End of a script: drop its database unless ``--keep-db``; best effort (the next run drops it anyway)."""
    if keep:
        return
    try:
        drop_database(dbname)
    except Exception as exc:
        log(f"could not drop {dbname}: {exc!r}")


def server_settings() -> dict[str, str]:
    """A few server settings that decide commit cost; printed alongside results."""
    import psycopg

    names = ("server_version", "synchronous_commit", "fsync", "wal_sync_method", "shared_buffers")
    with psycopg.connect(conninfo(PG_ADMIN_DB), autocommit=True) as conn:
        return {n: str(conn.execute(f"SHOW {n}").fetchone()[0]) for n in names}  # type: ignore[index]


# --------------------------------------------------------------------------- statistics


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear-interpolated percentile (same definition as numpy's default), pct in [0, 100]."""
    if not values:
        return math.nan
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (pct / 100.0) * (len(ordered) - 1)
    lo = math.floor(rank)
    hi = math.ceil(rank)
    frac = rank - lo
    return ordered[lo] + (ordered[hi] - ordered[lo]) * frac


def median(values: Iterable[float]) -> float:
    vals = list(values)
    return statistics.median(vals) if vals else math.nan


class Stopwatch:
    """``with Stopwatch() as sw: ...; sw.seconds``, on perf_counter."""

    def __enter__(self) -> Stopwatch:
        self.start = time.perf_counter()
        self.seconds = math.nan
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start


# --------------------------------------------------------------------------- results


@dataclasses.dataclass
class BenchResult:
    system: str  # "pgqueuer 1.6.0", "procrastinate 3.10.0", "postgresql 15.x"
    backend: str  # driver / mode, e.g. "postgresql+asyncpg"
    jobs: int  # jobs (or statements) measured
    seconds: float  # wall time of the measured phase (median round for throughput)
    jobs_per_s: float  # median over rounds (throughput); nan for latency rows
    p50_ms: float  # latency rows only; nan otherwise
    p99_ms: float
    notes: str = ""
    cpu_us_per_job: float = math.nan  # CPU time of the benchmark process (all threads) per job
    server_cpu_us_per_job: float = math.nan  # all postgres processes' CPU per job (server_cpu.py)
    server_db_cpu_us_per_job: float = math.nan  # of which the benchmark database's backends

    def to_json(self) -> str:
        def clean(v: Any) -> Any:
            return None if isinstance(v, float) and math.isnan(v) else v

        return json.dumps({k: clean(v) for k, v in dataclasses.asdict(self).items()}, sort_keys=False)


def _fmt(v: Any, digits: int = 1) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        return f"{v:,.{digits}f}"
    return str(v)


def print_table(results: Sequence[BenchResult], out: Any = None) -> None:
    """Plain fixed-width table; notes go on their own indented line so rows stay readable."""
    out = out or sys.stdout
    headers = ["system", "backend", "jobs", "seconds", "jobs/s", "p50 ms", "p99 ms"]
    rows = [
        [
            r.system,
            r.backend,
            str(r.jobs),
            _fmt(r.seconds, 3),
            _fmt(r.jobs_per_s, 0),
            _fmt(r.p50_ms, 2),
            _fmt(r.p99_ms, 2),
        ]
        for r in results
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    print(line, file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for r, row in zip(results, rows, strict=True):
        print(
            "  ".join(c.rjust(w) if i >= 2 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))),
            file=out,
        )
        if r.notes:
            print(f"    notes: {r.notes}", file=out)
    out.flush()


def emit(results: Sequence[BenchResult], as_json: bool) -> None:
    """Table to stdout; with --json also one JSON object per line (after the table)."""
    print_table(results)
    if as_json:
        for r in results:
            print(r.to_json())
    sys.stdout.flush()


def log(msg: str) -> None:
    """Progress messages go to stderr so stdout stays table + JSON lines."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- CLI + safety


def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--jobs", type=int, default=5000, help="no-op jobs per throughput round (default 5000)")
    p.add_argument("--concurrency", type=int, default=10, help="worker concurrency (default 10)")
    p.add_argument("--rounds", type=int, default=3, help="throughput rounds; the median is reported (default 3)")
    p.add_argument(
        "--latency-jobs",
        type=int,
        default=200,
        help="jobs enqueued one at a time for latency (default 200; 0 skips)",
    )
    p.add_argument("--gap-ms", type=float, default=20.0, help="gap between latency enqueues (default 20 ms)")
    p.add_argument("--batch-size", type=int, default=20, help="fetch batch size where the peer has one (default 20)")
    p.add_argument("--json", action="store_true", help="also print one JSON object per result line")
    p.add_argument(
        "--hard-timeout",
        type=float,
        default=300.0,
        help="kill the whole run after this many seconds (default 300)",
    )
    p.add_argument("--keep-db", action="store_true", help="leave the benchmark database behind at the end")
    p.add_argument(
        "--analyze",
        action="store_true",
        help="ANALYZE the queue table after the bulk enqueue, as autovacuum would within a minute "
        "(default: a table never analysed, as in the first seconds after a burst into a new table)",
    )
    return p


def analyze_table(dbname: str, table: str) -> None:
    """Refresh the planner's statistics of *table* (e.g. 'pgqueuer' or 'chokaq."JobsHot"')."""
    import psycopg

    with psycopg.connect(conninfo(dbname), autocommit=True) as conn:
        conn.execute(f"ANALYZE {table}")


def install_hard_timeout(seconds: float) -> None:
    """Whatever happens (a hung worker, a lost NOTIFY), the process exits after *seconds*."""

    def _boom(signum: int, frame: Any) -> None:
        sys.stderr.write(f"\nHARD TIMEOUT after {seconds:.0f}s: aborting benchmark\n")
        sys.stderr.flush()
        os._exit(3)

    signal.signal(signal.SIGALRM, _boom)
    signal.alarm(max(1, math.ceil(seconds)))


def cancel_hard_timeout() -> None:
    signal.alarm(0)


def package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


# --------------------------------------------------------------------------- machine noise


def _proc_stat() -> tuple[int, int]:
    """(busy, total) jiffies over all CPUs from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # user..steal (guest is already counted in user)
    return total - idle, total


class CpuSampler:
    """How busy the whole machine was during a phase, and how much of that was this process.

    The box is shared (2 cores; other sessions may run tests at the same time), so every
    throughput figure carries this note to show whether a round had the machine to itself.
    Machine busy includes the PostgreSQL backends doing this benchmark's work.
    """

    def __init__(self, dbname: str | None = None) -> None:
        self.dbname = dbname  # the benchmark database, to tell its backends' CPU from foreign load

    def __enter__(self) -> CpuSampler:
        self._server0 = read_server_cpu(self.dbname)
        self._b0, self._t0 = _proc_stat()
        self._self0 = sum(os.times()[:2])
        self._w0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        b1, t1 = _proc_stat()
        wall = time.perf_counter() - self._w0
        ncpu = os.cpu_count() or 1
        self.machine_pct = 100.0 * (b1 - self._b0) / max(1, t1 - self._t0)  # of all cores
        self.self_seconds = sum(os.times()[:2]) - self._self0
        # read after this process's own CPU, so the /proc scan is not charged to the system measured
        self.server = read_server_cpu(self.dbname) - self._server0
        self.self_pct = 100.0 * self.self_seconds / max(1e-9, wall) / ncpu
        self.loadavg = os.getloadavg()[0]

    def note(self) -> str:
        server = f", postgres {self.server.seconds:.2f}s CPU" if self.dbname else ""
        return f"cpu busy {self.machine_pct:.0f}% of {os.cpu_count()} cores (this process {self.self_pct:.0f}%{server})"

    def per_job(self, n: int) -> dict[str, float]:
        """Client and server CPU per job in microseconds, as the result dicts of every script carry them."""
        return {
            "cpu_us_per_job": self.self_seconds / n * 1e6,
            "server_cpu_us_per_job": self.server.seconds / n * 1e6,
            "server_db_cpu_us_per_job": self.server.db_seconds / n * 1e6,
        }


def summarize(system: str, backend: str, args: Any, rounds: list[dict[str, Any]], settings_note: str) -> BenchResult:
    """Median-of-rounds throughput row.

    Each round is a dict with seconds, enqueue_s, startup_s, steady_rate and cpu.
    """
    n = args.jobs
    times = [r["seconds"] for r in rounds]
    med = median(times)
    per_round = ", ".join(f"{n / r['seconds']:,.0f}" for r in rounds)
    return BenchResult(
        system=system,
        backend=backend,
        jobs=n,
        seconds=med,
        jobs_per_s=n / med,
        p50_ms=math.nan,
        p99_ms=math.nan,
        cpu_us_per_job=median(r["cpu_us_per_job"] for r in rounds),
        server_cpu_us_per_job=median(r["server_cpu_us_per_job"] for r in rounds),
        server_db_cpu_us_per_job=median(r["server_db_cpu_us_per_job"] for r in rounds),
        notes=(
            f"throughput from worker start to all {n} acknowledged, median of {len(rounds)} rounds "
            f"(per round jobs/s: {per_round}); worker process CPU median "
            f"{median(r['cpu_us_per_job'] for r in rounds):.0f} us/job, postgres CPU median "
            f"{median(r['server_cpu_us_per_job'] for r in rounds):.0f} us/job; "
            f"excluding worker startup (first job start -> all acked) "
            f"median {median(r['steady_rate'] for r in rounds):,.0f} jobs/s; worker startup median "
            f"{median(r['startup_s'] for r in rounds) * 1000:.0f} ms; bulk enqueue median "
            f"{median(r['enqueue_s'] for r in rounds):.3f}s; {settings_note}; "
            + "; ".join(f"r{i + 1} {r['cpu']}" for i, r in enumerate(rounds))
        ),
    )


def round_line(name: str, n: int, rnd: int, res: dict[str, Any]) -> str:
    return (
        f"{name} round {rnd}: {n} jobs in {res['seconds']:.3f}s = {n / res['seconds']:,.0f} jobs/s "
        f"(startup {res['startup_s'] * 1000:.0f} ms, "
        f"first start->all acked {res['steady_rate']:,.0f} jobs/s; "
        f"bulk enqueue {res['enqueue_s']:.3f}s; {res['cpu_us_per_job']:.0f} us CPU/job in this process, "
        f"{res['server_cpu_us_per_job']:.0f} us postgres CPU/job; {res['cpu']})"
    )
