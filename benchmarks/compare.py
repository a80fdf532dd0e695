"""chokaq vs pgqueuer vs procrastinate (and the database's own UPDATE rate), in one run, one table.

    .venv/bin/python benchmarks/compare.py [--jobs 5000] [--rounds 3] [--latency-jobs 200] [--json]

chokaq runs in this process (chokaq's .venv); the peers run as subprocesses of their own venv
(``.venv-bench/bin/python benchmarks/peers/*.py ... --json``) and their JSON lines are collected.
Throughput rounds are interleaved (round 1 of every system, then round 2, ...) so that a burst
of load from other users of the machine hits all systems alike; each system's figure is the
median of its rounds. Then one latency phase per system, then db_baseline.py.

Pairings (same fetch batch 20 everywhere):
  * chokaq C=40 vs pgqueuer: pgqueuer refuses max_concurrent_tasks < 2*batch_size, so its C=10
    run is really 40 concurrent tasks;
  * chokaq C=10 vs procrastinate C=10 (procrastinate has no fetch batching).
Targets: chokaq >= 1.5x pgqueuer, >= 3x procrastinate, enqueue->start p50 <= 20 ms on PostgreSQL.

Round trips: measured for chokaq with SQLAlchemy engine events (statements + BEGIN + COMMIT).
For every PostgreSQL system, the server's count of committed transactions for the benchmark
database (``pg_stat_database.xact_commit``, whole round incl. schema install and enqueue) is
read after round 1 (the peers run round 1 with ``--keep-db``). For the peers round trips are
derived from that: pgqueuer/asyncpg runs in autocommit (1 statement = 1 transaction = 1 round
trip); procrastinate pays pool check + BEGIN + call + COMMIT = 4 round trips per transaction
(benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.peers.common import (
    cancel_hard_timeout,
    drop_database,
    install_hard_timeout,
    log,
    median,
    package_version,
    percentile,
    server_settings,
)
from benchmarks.throughput import (
    LATENCY_PATH,
    backend_label,
    latency_phase,
    per_job,
    server_commits,
    throughput_round,
    versions,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = {
    "pgqueuer": ("benchmarks/peers/pgqueuer_bench.py", "bench_pgqueuer", 1.0),  # rt per server tx
    "procrastinate": ("benchmarks/peers/procrastinate_bench.py", "bench_procrastinate", 4.0),
}
TARGET_PGQ, TARGET_PROC, TARGET_P50 = 1.5, 3.0, 20.0


def parse_args() -> Any:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--latency-jobs", type=int, default=200)
    p.add_argument("--gap-ms", type=float, default=20.0)
    p.add_argument("--batch-size", type=int, default=20)
    p.add_argument("--concurrency", default="10,40", help="chokaq concurrencies, comma separated (default 10,40)")
    p.add_argument("--peer-concurrency", type=int, default=10, help="peers' --concurrency (default 10)")
    p.add_argument("--no-sqlite", action="store_true", help="skip chokaq on SQLite")
    p.add_argument("--no-peers", action="store_true", help="chokaq only")
    p.add_argument("--no-baseline", action="store_true")
    p.add_argument("--bench-python", default=os.path.join(ROOT, ".venv-bench", "bin", "python"))
    p.add_argument("--json", action="store_true", help="also print one JSON object per row")
    p.add_argument(
        "--analyze",
        action="store_true",
        help="every system's queue table is ANALYZEd after its bulk enqueue (steady-state planner statistics)",
    )
    p.add_argument("--hard-timeout", type=float, default=1500.0)
    return p.parse_args()


def run_peer(py: str, script: str, extra: list[str], timeout: float = 400.0) -> list[dict[str, Any]]:
    cmd = [py, os.path.join(ROOT, script), *extra, "--json"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def fmt(v: Any, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def table(rows: list[dict[str, Any]]) -> None:
    cols = [
        ("system", "system", None),
        ("backend", "backend", None),
        ("C", "c", None),
        ("jobs/s", "jobs_per_s", 0),
        ("chokaq/peer", "ratio", None),
        ("p50 ms", "p50_ms", 2),
        ("p99 ms", "p99_ms", 2),
        ("cpu us/job", "cpu_us_per_job", 0),
        ("stmts/job", "stmts_per_job", 3),
        ("rt/job", "rt_per_job", 3),
        ("srv tx/job", "server_tx_per_job", 3),
        ("load1", "loadavg", 2),
    ]
    cells = [[fmt(r.get(key), d) if d is not None else fmt(r.get(key)) for _, key, d in cols] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (h, _, _) in enumerate(cols)]
    print("  ".join(h.ljust(w) for (h, _, _), w in zip(cols, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print("  ".join(x.ljust(w) if i < 2 else x.rjust(w) for i, (x, w) in enumerate(zip(c, widths, strict=True))))
    sys.stdout.flush()


def main() -> int:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING)
    install_hard_timeout(args.hard_timeout)
    concs = [int(c) for c in args.concurrency.split(",") if c.strip()]
    backends = ["postgres"] + ([] if args.no_sqlite else ["sqlite"])
    peers = {} if args.no_peers else PEERS
    if peers and not os.path.exists(args.bench_python):
        sys.exit(f"{args.bench_python} not found: run `make bench` (creates .venv-bench) or pass --bench-python")
    log(f"compare: load average {os.getloadavg()}, versions {versions()}")
    ver = versions()
    n = args.jobs
    common = ["--jobs", str(n), "--batch-size", str(args.batch_size), *(["--analyze"] if args.analyze else [])]

    # ------------------------------------------------------------ throughput, interleaved
    ck: dict[tuple[str, int], list[dict[str, Any]]] = {(b, c): [] for b in backends for c in concs}
    pr: dict[str, list[dict[str, Any]]] = {p: [] for p in peers}
    peer_srv: dict[str, float | None] = {}
    for rnd in range(1, args.rounds + 1):
        for b in backends:
            for c in concs:
                res = throughput_round(b, n, c, args.batch_size, rnd, args.analyze)
                ck[(b, c)].append(res)
                log(f"round {rnd}: chokaq {b} C={c}: {n / res['seconds']:,.0f} jobs/s (load {res['loadavg']:.2f})")
        for name, (script, db, _) in peers.items():
            keep = ["--keep-db"] if rnd == 1 else []
            load = os.getloadavg()[0]
            out = run_peer(
                args.bench_python,
                script,
                [*common, "--concurrency", str(args.peer_concurrency), "--rounds", "1", "--latency-jobs", "0", *keep],
            )
            row = out[0]
            row["loadavg"] = load
            pr[name].append(row)
            if rnd == 1:
                time.sleep(0.5)
                commits = server_commits(db)
                peer_srv[name] = commits / n if commits else None
                drop_database(db)
            log(f"round {rnd}: {name}: {row['jobs_per_s']:,.0f} jobs/s (load {load:.2f})")

    # Statement counts come from one extra round per chokaq configuration: the counting hooks
    # would slow the timed rounds, and the peers run uninstrumented.
    counted = {
        (b, c): throughput_round(b, n, c, args.batch_size, 0, args.analyze, count=True) for (b, c) in ck if ck[(b, c)]
    }
    rows: list[dict[str, Any]] = []
    ck_rate: dict[tuple[str, int], float] = {}
    for (b, c), rounds in ck.items():
        if not rounds:
            continue
        pj = per_job([counted[(b, c)]], n)
        rate = n / median(r["seconds"] for r in rounds)
        ck_rate[(b, c)] = rate
        rows.append(
            {
                "system": f"chokaq {package_version('chokaq')}",
                "backend": backend_label(b),
                "c": c,
                "jobs_per_s": rate,
                "cpu_us_per_job": median(r["cpu_us_per_job"] for r in rounds),
                "stmts_per_job": pj["stmts_per_job"],
                "rt_per_job": pj["round_trips_per_job"],
                "server_tx_per_job": pj["server_tx_per_job"],
                "loadavg": median(r["loadavg"] for r in rounds),
                "per_round": [n / r["seconds"] for r in rounds],
                "breakdown": pj["breakdown"],
                "kind": "throughput",
            }
        )
    peer_rate: dict[str, float] = {}
    for name, rounds in pr.items():
        rate = n / median(r["seconds"] for r in rounds)
        peer_rate[name] = rate
        srv = peer_srv.get(name)
        rows.append(
            {
                "system": rounds[0]["system"],
                "backend": rounds[0]["backend"],
                "c": max(args.peer_concurrency, 2 * args.batch_size) if name == "pgqueuer" else args.peer_concurrency,
                "jobs_per_s": rate,
                "server_tx_per_job": srv,
                "cpu_us_per_job": median(r["cpu_us_per_job"] for r in rounds if r.get("cpu_us_per_job") is not None),
                "rt_per_job": srv * PEERS[name][2] if srv else None,
                "loadavg": median(r["loadavg"] for r in rounds),
                "per_round": [r["jobs_per_s"] for r in rounds],
                "kind": "throughput",
            }
        )
    # ratios: chokaq PostgreSQL at the matching concurrency over the peer
    pairs = {"pgqueuer": 40, "procrastinate": 10}
    for r in rows:
        if r["system"].startswith("chokaq"):
            parts = []
            for name, rate in peer_rate.items():
                parts.append(f"{r['jobs_per_s'] / rate:.2f}x {name[:4]}")
            r["ratio"] = ", ".join(parts) if parts else None
        else:
            name = r["system"].split()[0]
            c = pairs.get(name, 10)
            mine = ck_rate.get(("postgres", c)) or (max(ck_rate.values()) if ck_rate else None)
            r["ratio"] = f"{mine / r['jobs_per_s']:.2f}x (C={c})" if mine else None

    # ------------------------------------------------------------ latency
    if args.latency_jobs > 0:
        for b in backends:
            for producer in ("separate", "same"):
                load = os.getloadavg()[0]
                lat, _ = latency_phase(b, args.latency_jobs, concs[0], args.batch_size, args.gap_ms, producer)
                how = LATENCY_PATH[(b, producer)]
                rows.append(
                    {
                        "system": f"chokaq {package_version('chokaq')}",
                        "backend": f"{backend_label(b)} ({how})",
                        "c": concs[0],
                        "p50_ms": percentile(lat, 50),
                        "p99_ms": percentile(lat, 99),
                        "loadavg": load,
                        "kind": "latency",
                        "producer": producer,
                    }
                )
                log(f"latency chokaq {b} ({how}): p50 {percentile(lat, 50):.2f} ms p99 {percentile(lat, 99):.2f} ms")
        for name, (script, _, _) in peers.items():
            load = os.getloadavg()[0]
            out = run_peer(
                args.bench_python,
                script,
                [
                    *common,
                    "--jobs",
                    "0",
                    "--concurrency",
                    str(args.peer_concurrency),
                    "--latency-jobs",
                    str(args.latency_jobs),
                    "--gap-ms",
                    str(args.gap_ms),
                ],
            )
            row = out[0]
            rows.append(
                {
                    "system": row["system"],
                    "backend": row["backend"],
                    "c": args.peer_concurrency,
                    "p50_ms": row["p50_ms"],
                    "p99_ms": row["p99_ms"],
                    "loadavg": load,
                    "kind": "latency",
                }
            )
            log(f"latency {name}: p50 {row['p50_ms']:.2f} ms p99 {row['p99_ms']:.2f} ms")

    # ------------------------------------------------------------ database baseline
    if not args.no_baseline and os.path.exists(args.bench_python):
        load = os.getloadavg()[0]
        for row in run_peer(args.bench_python, "benchmarks/peers/db_baseline.py", []):
            rows.append(
                {
                    "system": row["system"],
                    "backend": row["backend"] + " (UPDATE/s)",
                    "c": 1,
                    "jobs_per_s": row["jobs_per_s"],
                    "loadavg": load,
                    "kind": "baseline",
                }
            )

    cancel_hard_timeout()
    # ------------------------------------------------------------ report
    s = server_settings()
    print(
        f"\nchokaq vs peers: N={n} no-op jobs, {args.rounds} interleaved rounds (median), fetch batch "
        f"{args.batch_size}, latency {args.latency_jobs} jobs {args.gap_ms:g} ms apart; PostgreSQL "
        f"{s['server_version'].split()[0]} synchronous_commit={s['synchronous_commit']}; "
        f"{os.cpu_count()} cores; load average now {os.getloadavg()[0]:.2f}; chokaq git {ver['git']}, "
        f"SQLAlchemy {ver['sqlalchemy']}, psycopg {ver['psycopg']}, Python {ver['python']}\n"
    )
    table(rows)
    print(
        "\nrt/job = round trips per job (chokaq: measured statements + BEGIN + COMMIT; peers: derived from "
        "srv tx/job). srv tx/job = pg_stat_database.xact_commit / N for round 1 (whole round)."
    )
    for r in rows:
        if r.get("breakdown"):
            print(f"  {r['backend']} C={r['c']}: {r['breakdown']}")
        if r.get("per_round"):
            print(
                f"  {r['system']} {r['backend']} C={r['c']} per round jobs/s: "
                + ", ".join(f"{x:,.0f}" for x in r["per_round"])
            )
    print("\nTargets (PostgreSQL):")
    verdicts = []
    if "pgqueuer" in peer_rate and ("postgres", 40) in ck_rate:
        x = ck_rate[("postgres", 40)] / peer_rate["pgqueuer"]
        verdicts.append(
            f"  chokaq C=40 / pgqueuer = {x:.2f}x (target >= {TARGET_PGQ}x): "
            + (
                "MET"
                if x >= TARGET_PGQ
                else f"MISSED by {TARGET_PGQ / x:.1f}x (needs {TARGET_PGQ * peer_rate['pgqueuer']:,.0f} jobs/s)"
            )
        )
    if "procrastinate" in peer_rate and ("postgres", 10) in ck_rate:
        x = ck_rate[("postgres", 10)] / peer_rate["procrastinate"]
        verdicts.append(
            f"  chokaq C=10 / procrastinate = {x:.2f}x (target >= {TARGET_PROC}x): "
            + ("MET" if x >= TARGET_PROC else f"MISSED (needs {TARGET_PROC * peer_rate['procrastinate']:,.0f} jobs/s)")
        )
    for r in rows:
        if r["kind"] == "latency" and r["system"].startswith("chokaq") and r["backend"].startswith("postgres"):
            p50 = r["p50_ms"]
            verdicts.append(
                f"  chokaq enqueue->start p50 on PostgreSQL, {r['backend'].split('(')[-1].rstrip(')')} = "
                f"{p50:.2f} ms (target <= {TARGET_P50:g} ms): " + ("MET" if p50 <= TARGET_P50 else "MISSED")
            )
    print("\n".join(verdicts) if verdicts else "  (not enough systems run to judge)")
    if args.json:
        for r in rows:
            print(json.dumps({k: v for k, v in r.items() if k != "breakdown"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
