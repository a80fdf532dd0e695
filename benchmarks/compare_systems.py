"""The systems compare.py runs side by side, and how one round of each is run and recorded.

chokaq runs in compare.py's own process (chokaq's .venv, ``throughput.throughput_round``); every peer
runs as a subprocess of its own venv (``peers/*_bench.py --rounds 1 --json``), one round per call, so
that compare.py can interleave rounds across systems. Before every round, of every system, the
calibration workload (calibration.py) is timed in compare.py's process and kept beside the round.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.calibration import calibrate
from benchmarks.peers.common import drop_database, log, package_version
from benchmarks.throughput import backend_label, per_job, server_commits, throughput_round

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("fresh", "analyze")


@dataclass
class Round:
    """One round of one system in one mode, with the calibration timed just before it."""

    system: str
    mode: str
    round: int
    calib_ms: float
    calib_cpu_ms: float
    loadavg: float
    jobs_per_s: float = math.nan
    cpu_us_per_job: float = math.nan
    server_cpu_us_per_job: float = math.nan
    server_db_cpu_us_per_job: float = math.nan
    error: str | None = None

    def to_json(self) -> str:
        return json.dumps({"kind": "round", **{k: _clean(v) for k, v in asdict(self).items()}})


def _clean(v: Any) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


@dataclass(frozen=True)
class Settings:
    """What every round of the run shares."""

    jobs: int
    batch: int
    peer_concurrency: int
    oban_concurrency: int
    latency_jobs: int
    gap_ms: float


def run_peer(
    py: str, script: str, extra: list[str], timeout: float = 400.0, env: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    cmd = [py, os.path.join(ROOT, script), *extra, "--json"]
    environ = {**os.environ, **env} if env else None
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=environ)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@dataclass
class ChokaqSystem:
    backend: str  # "postgres" | "sqlite"
    c: int
    counts: dict[str, dict[str, Any]] = field(default_factory=dict)  # mode -> per_job() of the counting round
    skip: str | None = None  # chokaq always runs; here so that every system has one

    @property
    def key(self) -> str:
        return f"chokaq {self.backend} C={self.c}"

    @property
    def label(self) -> str:
        return f"chokaq {package_version('chokaq')}"

    @property
    def backend_label(self) -> str:
        return backend_label(self.backend)

    def run_round(self, s: Settings, mode: str, rnd: int) -> dict[str, float]:
        res = throughput_round(self.backend, s.jobs, self.c, s.batch, rnd, mode == "analyze")
        return {
            "jobs_per_s": s.jobs / res["seconds"],
            "cpu_us_per_job": res["cpu_us_per_job"],
            "server_cpu_us_per_job": res["server_cpu_us_per_job"],
            "server_db_cpu_us_per_job": res["server_db_cpu_us_per_job"],
        }

    def count(self, s: Settings, mode: str) -> None:
        """Statement counts from one extra round: the counting hooks would slow the timed rounds."""
        try:
            counted = throughput_round(self.backend, s.jobs, self.c, s.batch, 0, mode == "analyze", count=True)
        except Exception as exc:  # the timed rounds are done: report them without the counts
            log(f"counting round {mode}: {self.key} FAILED: {exc!r}")
            return
        self.counts[mode] = per_job([counted], s.jobs)


@dataclass
class PeerSystem:
    name: str  # "pgqueuer", "oban-py", "procrastinate"
    script: str
    db: str
    python: str
    concurrency: int  # passed as --concurrency
    effective_c: int  # what the peer really runs (pgqueuer raises C to 2 x batch)
    pair_c: int  # the chokaq PostgreSQL concurrency it is paired with
    rt_per_tx: float | None  # round trips per server transaction, where one constant holds
    skip: str | None = None  # why this peer does not run (its venv is missing)
    label: str = ""
    backend_label: str = ""
    srv_tx_per_job: dict[str, float | None] = field(default_factory=dict)  # mode -> xact_commit / N, round 1
    env: dict[str, str] = field(default_factory=dict)  # environment of its runs, over this process's

    @property
    def key(self) -> str:
        return self.name

    def _args(self, s: Settings, mode: str, jobs: int) -> list[str]:
        return [
            "--jobs",
            str(jobs),
            "--batch-size",
            str(s.batch),
            "--concurrency",
            str(self.concurrency),
            *(["--analyze"] if mode == "analyze" else []),
        ]

    def run_round(self, s: Settings, mode: str, rnd: int) -> dict[str, float]:
        keep = ["--keep-db"] if rnd == 1 else []
        row = run_peer(
            self.python,
            self.script,
            [*self._args(s, mode, s.jobs), "--rounds", "1", "--latency-jobs", "0", *keep],
            env=self.env,
        )[0]
        self.label, self.backend_label = row["system"], row["backend"]
        if rnd == 1:
            time.sleep(0.5)  # the peer's backends flush their statistics as they exit
            commits = server_commits(self.db)
            self.srv_tx_per_job[mode] = commits / s.jobs if commits else None
            drop_database(self.db)
        return {
            k: _nan(row.get(k))
            for k in ("jobs_per_s", "cpu_us_per_job", "server_cpu_us_per_job", "server_db_cpu_us_per_job")
        }

    def latency(self, s: Settings) -> dict[str, Any]:
        extra = [
            *self._args(s, "fresh", 0),
            "--latency-jobs",
            str(s.latency_jobs),
            "--gap-ms",
            str(s.gap_ms),
        ]
        row = run_peer(self.python, self.script, extra, env=self.env)[0]
        self.label, self.backend_label = row["system"], row["backend"]
        return row


def _us(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.0f} us/job"


def _nan(v: Any) -> float:
    return math.nan if v is None else float(v)


System = ChokaqSystem | PeerSystem


def peer_systems(bench_python: str, oban_python: str, s: Settings) -> list[PeerSystem]:
    """pgqueuer and procrastinate from .venv-bench, oban-py from its own Python >= 3.12 venv."""
    pgq_c = max(s.peer_concurrency, 2 * s.batch)  # pgqueuer refuses max_concurrent_tasks < 2 x batch_size
    peers = [
        PeerSystem("pgqueuer", "benchmarks/peers/pgqueuer_bench.py", "bench_pgqueuer", bench_python,
                   s.peer_concurrency, pgq_c, 40, 1.0),
        # oban acknowledges with one UPDATE per job inside a transaction per batch: no constant
        # number of round trips per server transaction, so none is derived
        PeerSystem("oban-py", "benchmarks/peers/oban_bench.py", "bench_oban", oban_python,
                   s.oban_concurrency, s.oban_concurrency, 40, None),
        PeerSystem("procrastinate", "benchmarks/peers/procrastinate_bench.py", "bench_procrastinate", bench_python,
                   s.peer_concurrency, s.peer_concurrency, 10, 4.0),
    ]  # fmt: skip
    for p in peers:
        if not os.path.exists(p.python):
            need = "python3.12 (make bench-oban-venv)" if p.name == "oban-py" else "make bench"
            p.skip = f"not run: {p.python} not found; needs {need}"
            p.label, p.backend_label = p.name, "-"
    return peers


class BaselineSystem(PeerSystem):
    """chokaq as an older checkout has it, measured like a peer; its rows are labelled as the
    baseline, never as chokaq, so the targets are not judged on them."""

    def run_round(self, s: Settings, mode: str, rnd: int) -> dict[str, float]:
        figures = super().run_round(s, mode, rnd)
        self.label = self.name
        return figures

    def latency(self, s: Settings) -> dict[str, Any]:
        row = super().latency(s)
        self.label = row["system"] = self.name
        return row


def baseline_system(root: str, c: int, env: dict[str, str] | None = None) -> BaselineSystem:
    """chokaq as an older checkout ``root`` has it (``git worktree add DIR <commit>`` and its own
    ``make .venv/.installed``), run by *this* checkout's throughput.py copied there, so both sides are
    measured alike; paired round by round with chokaq C=``c`` on PostgreSQL (before/after figures)."""
    script, python = os.path.join(root, "benchmarks", "throughput.py"), os.path.join(root, ".venv", "bin", "python")
    commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    base = BaselineSystem(f"chokaq@{commit.stdout.strip() or 'base'}", script, "bench_chokaq", python, c, c, c, None)
    if not os.path.exists(base.python):
        base.skip = f"not run: {base.python} not found"
    elif os.path.realpath(root) != os.path.realpath(ROOT):
        # The old checkout's own harness may predate what the table reports: bring this one.
        shutil.copytree(os.path.join(ROOT, "benchmarks"), os.path.join(root, "benchmarks"), dirs_exist_ok=True)
    base.label, base.backend_label = base.name, "-"
    base.env = dict(env or {})
    if base.env:
        base.name += "[" + ",".join(f"{k}={v}" for k, v in sorted(base.env.items())) + "]"
    return base


def timed_round(system: System, s: Settings, mode: str, rnd: int) -> Round:
    """Calibrate, then run one round; a failing round is recorded with its error and the run goes on."""
    calib_ms, calib_cpu_ms = calibrate()
    r = Round(system.key, mode, rnd, calib_ms, calib_cpu_ms, os.getloadavg()[0])
    try:
        for k, v in system.run_round(s, mode, rnd).items():
            setattr(r, k, v)
    except Exception as exc:  # a peer that crashes or hangs must not end the whole comparison
        r.error = f"{type(exc).__name__}: {str(exc)[-300:]}"
        log(f"round {rnd} {mode}: {system.key} FAILED: {r.error}")
        return r
    log(
        f"round {rnd} {mode}: {system.key}: {r.jobs_per_s:,.0f} jobs/s, client {r.cpu_us_per_job:.0f} us/job, "
        f"postgres {_us(r.server_cpu_us_per_job)} (calibration {calib_ms:.0f} ms, load {r.loadavg:.2f})"
    )
    return r
