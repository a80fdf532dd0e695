"""chokaq vs pgqueuer vs oban-py vs procrastinate (and the database's own UPDATE rate), one run, one table.

    .venv/bin/python benchmarks/compare.py [--jobs 5000] [--rounds 3] [--modes fresh,analyze] [--json]

chokaq runs in this process (chokaq's .venv); the peers run as subprocesses of their own venvs
(``.venv-bench`` for pgqueuer and procrastinate, ``.venv-bench-oban`` on Python >= 3.12 for oban-py),
one round per call, and their JSON lines are collected (compare_systems.py). A peer whose venv is
missing gets a row saying so, and the run goes on; so does a round that fails.

Rounds are interleaved: round 1 of every system in every mode, then round 2, ... so that a burst of
load from other users of the machine hits all systems alike. Modes: ``fresh`` (the queue table was
never analysed, as in the first seconds after a burst into a new table) and ``analyze`` (every
system's queue table is ANALYZEd after its bulk enqueue: steady-state planner statistics). Before
every round the calibration workload (calibration.py) is timed and printed beside the round.

Per round and system: jobs/s, client CPU per job (the benchmark process, all threads) and server
CPU per job (all postgres processes, from /proc: peers/server_cpu.py), during the timed phase. The
report (compare_report.py) gives medians, every round, and paired ratios chokaq / peer per round.
Then one latency phase per system (fresh tables), then db_baseline.py.

Pairings (same fetch batch 20 where the peer has one):
  * chokaq C=40 vs pgqueuer: pgqueuer refuses max_concurrent_tasks < 2*batch_size, so its C=10
    run is really 40 concurrent tasks;
  * chokaq C=40 vs oban-py with queue limit 40 (oban fetches limit - running, no batch size);
  * chokaq C=10 vs procrastinate C=10 (procrastinate has no fetch batching).

Round trips: measured for chokaq with SQLAlchemy engine events (statements + BEGIN + COMMIT) in one
extra, untimed round per configuration and mode. For every PostgreSQL system, the server's count
of committed transactions for the benchmark database (``pg_stat_database.xact_commit``, whole round
incl. schema install and enqueue) is read after round 1 (the peers run round 1 with ``--keep-db``).
For pgqueuer and procrastinate round trips are derived from that: pgqueuer/asyncpg runs in autocommit
(1 statement = 1 transaction = 1 round trip); procrastinate pays pool check + BEGIN + call + COMMIT =
4 round trips per transaction (benchmarks/README.md). oban-py has no such constant (one UPDATE per
job inside one transaction per acknowledgement batch), so its rt/job is left empty.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.compare_report import paired_lines, per_round_lines, table, throughput_rows, verdicts
from benchmarks.compare_systems import (
    MODES,
    ROOT,
    ChokaqSystem,
    PeerSystem,
    Round,
    Settings,
    System,
    baseline_system,
    peer_systems,
    run_peer,
    timed_round,
)
from benchmarks.peers.common import (
    cancel_hard_timeout,
    install_hard_timeout,
    log,
    package_version,
    percentile,
    server_settings,
)
from benchmarks.throughput import LATENCY_PATH, backend_label, latency_phase, versions


def parse_args() -> Any:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--latency-jobs", type=int, default=200)
    p.add_argument("--gap-ms", type=float, default=20.0)
    p.add_argument("--batch-size", type=int, default=20)
    p.add_argument("--concurrency", default="10,40", help="chokaq concurrencies, comma separated (default 10,40)")
    p.add_argument("--peer-concurrency", type=int, default=10, help="pgqueuer's and procrastinate's --concurrency")
    p.add_argument("--oban-concurrency", type=int, default=40, help="oban-py's queue limit (default 40)")
    p.add_argument(
        "--modes",
        default="fresh,analyze",
        help="comma separated: fresh (queue tables never analysed), analyze (ANALYZEd after the bulk enqueue)",
    )
    p.add_argument("--analyze", action="store_true", help="the same as --modes analyze")
    p.add_argument("--no-sqlite", action="store_true", help="skip chokaq on SQLite")
    p.add_argument("--no-peers", action="store_true", help="chokaq only")
    p.add_argument("--no-baseline", action="store_true")
    p.add_argument("--bench-python", default=os.path.join(ROOT, ".venv-bench", "bin", "python"))
    p.add_argument("--oban-python", default=os.path.join(ROOT, ".venv-bench-oban", "bin", "python"))
    p.add_argument(
        "--baseline",
        metavar="DIR",
        help="also run the chokaq of an older checkout DIR (a git worktree with its own .venv), interleaved "
        "and paired with chokaq C=40 on PostgreSQL: before/after in one run",
    )
    p.add_argument(
        "--baseline-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment of the --baseline runs only (repeatable): e.g. the same checkout as baseline with "
        "CHOKAQ_BENCH_IDLE_SCHEDULES=0 while this run has 20",
    )
    p.add_argument("--json", action="store_true", help="also print one JSON object per row and per round")
    p.add_argument("--hard-timeout", type=float, default=2400.0)
    args = p.parse_args()
    args.modes = ["analyze"] if args.analyze else [m.strip() for m in args.modes.split(",") if m.strip()]
    if bad := [m for m in args.modes if m not in MODES]:
        p.error(f"unknown mode(s) {bad}: choose from {', '.join(MODES)}")
    return args


def build_systems(args: Any, s: Settings) -> list[System]:
    concs = [int(c) for c in args.concurrency.split(",") if c.strip()]
    backends = ["postgres"] + ([] if args.no_sqlite else ["sqlite"])
    systems: list[System] = [ChokaqSystem(b, c) for b in backends for c in concs]
    if not args.no_peers:
        systems += peer_systems(args.bench_python, args.oban_python, s)
    if args.baseline:
        env = dict(kv.split("=", 1) for kv in args.baseline_env)
        systems.append(baseline_system(args.baseline, 40, env))
    return systems


def interleaved(systems: list[System], s: Settings, modes: list[str], n_rounds: int) -> list[Round]:
    """Round 1 of every system in every mode, then round 2, ..."""
    rounds: list[Round] = []
    for rnd in range(1, n_rounds + 1):
        for mode in modes:
            rounds += [timed_round(system, s, mode, rnd) for system in systems if not system.skip]
    return rounds


def chokaq_latency(systems: list[System], s: Settings) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    chokaq = [x for x in systems if isinstance(x, ChokaqSystem)]
    for b in dict.fromkeys(x.backend for x in chokaq):
        c = next(x.c for x in chokaq if x.backend == b)
        for producer in ("separate", "same"):
            load = os.getloadavg()[0]
            lat, _ = latency_phase(b, s.latency_jobs, c, s.batch, s.gap_ms, producer)
            how = LATENCY_PATH[(b, producer)]
            p50, p99 = percentile(lat, 50), percentile(lat, 99)
            rows.append(
                {
                    "system": f"chokaq {package_version('chokaq')}",
                    "backend": f"{backend_label(b)} ({how})",
                    "c": c,
                    "p50_ms": p50,
                    "p99_ms": p99,
                    "loadavg": load,
                    "kind": "latency",
                    "producer": producer,
                }
            )
            log(f"latency chokaq {b} ({how}): p50 {p50:.2f} ms p99 {p99:.2f} ms")
    return rows


def peer_latency(systems: list[System], s: Settings) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for peer in (x for x in systems if isinstance(x, PeerSystem) and not x.skip):
        load = os.getloadavg()[0]
        try:
            row = peer.latency(s)
        except Exception as exc:  # as for throughput: one failing peer does not end the run
            log(f"latency {peer.key} FAILED: {exc!r}")
            continue
        rows.append(
            {
                "system": row["system"],
                "backend": row["backend"],
                "c": peer.effective_c,
                "p50_ms": row["p50_ms"],
                "p99_ms": row["p99_ms"],
                "loadavg": load,
                "kind": "latency",
            }
        )
        log(f"latency {peer.key}: p50 {row['p50_ms']:.2f} ms p99 {row['p99_ms']:.2f} ms")
    return rows


def baseline_rows(bench_python: str) -> list[dict[str, Any]]:
    load = os.getloadavg()[0]
    return [
        {
            "system": row["system"],
            "backend": row["backend"] + " (UPDATE/s)",
            "c": 1,
            "jobs_per_s": row["jobs_per_s"],
            "loadavg": load,
            "kind": "baseline",
        }
        for row in run_peer(bench_python, "benchmarks/peers/db_baseline.py", [])
    ]


def header(args: Any, s: Settings) -> str:
    srv, ver = server_settings(), versions()
    return (
        f"\nchokaq vs peers: N={s.jobs} no-op jobs, {args.rounds} interleaved rounds (median), modes "
        f"{'+'.join(args.modes)}, fetch batch {s.batch}, latency {s.latency_jobs} jobs {s.gap_ms:g} ms apart; "
        f"PostgreSQL {srv['server_version'].split()[0]} synchronous_commit={srv['synchronous_commit']}; "
        f"{os.cpu_count()} cores; load average now {os.getloadavg()[0]:.2f}; chokaq git {ver['git']}, "
        f"SQLAlchemy {ver['sqlalchemy']}, psycopg {ver['psycopg']}, Python {ver['python']}\n"
    )


LEGEND = (
    "\ncpu us/job = CPU of the benchmark process (all threads) per job; srv cpu us/job = all postgres "
    "processes' CPU per job (utime+stime from /proc, incl. other users of the server), srv db = of which "
    "the benchmark database's backends; both over the timed phase. rt/job = round trips per job (chokaq: "
    "measured statements + BEGIN + COMMIT; peers: derived from srv tx/job). srv tx/job = "
    "pg_stat_database.xact_commit / N for round 1 (whole round). calib ms = median wall time of the "
    "calibration workload just before each round (about 200 ms on a quiet machine)."
)


def report(
    args: Any, systems: list[System], rounds: list[Round], latency: list[dict[str, Any]], extra: list[dict[str, Any]]
) -> None:
    rows = throughput_rows(systems, rounds, args.modes) + latency + extra
    print(header(args, Settings(args.jobs, args.batch_size, 0, 0, args.latency_jobs, args.gap_ms)))
    table(rows)
    print(LEGEND)
    for r in rows:
        if r.get("breakdown"):
            print(f"  {r['mode']} {r['backend']} C={r['c']}: {r['breakdown']}")
    print("\n" + "\n".join(per_round_lines(systems, rounds, args.modes)))
    print("\n" + "\n".join(paired_lines(systems, rounds, args.modes)))
    print("\n" + "\n".join(verdicts(systems, rounds, args.modes, latency)))
    if args.json:
        for r in rows:
            print(json.dumps({k: v for k, v in r.items() if k != "breakdown"}))
        for rnd in rounds:
            print(rnd.to_json())


def main() -> int:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING)
    install_hard_timeout(args.hard_timeout)
    s = Settings(
        args.jobs, args.batch_size, args.peer_concurrency, args.oban_concurrency, args.latency_jobs, args.gap_ms
    )
    systems = build_systems(args, s)
    log(f"compare: load average {os.getloadavg()}, versions {versions()}")
    for skipped in (x for x in systems if x.skip):
        log(f"{skipped.key}: {skipped.skip}")
    rounds = interleaved(systems, s, args.modes, args.rounds)
    for system in (x for x in systems if isinstance(x, ChokaqSystem)):
        for mode in args.modes:
            system.count(s, mode)
    latency = (chokaq_latency(systems, s) + peer_latency(systems, s)) if args.latency_jobs > 0 else []
    extra = baseline_rows(args.bench_python) if not args.no_baseline and os.path.exists(args.bench_python) else []
    cancel_hard_timeout()
    report(args, systems, rounds, latency, extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
