"""Database baseline: single-row UPDATE statements/s over one connection.

    .venv-bench/bin/python benchmarks/peers/db_baseline.py [--seconds 5] [--json]

Measures what one PostgreSQL connection can do before any queue logic is involved:
  * psycopg 3, autocommit: every UPDATE is its own transaction (one round trip + one commit,
    i.e. one WAL flush under synchronous_commit=on). This is the floor a queue pays per
    un-batched acknowledgement.
  * psycopg 3, one transaction: the same UPDATEs inside a single BEGIN ... COMMIT (round trip
    only, no per-statement commit).
  * pgbench (if installed), one client, same statement, autocommit, prepared protocol; and the
    same with 100 UPDATEs per transaction (statements/s = transactions/s * 100).

Each UPDATE touches one row by primary key, cycling over 100,000 rows so that no row builds
a long chain of versions inside the single long transaction.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.peers.common import (
    BenchResult,
    cancel_hard_timeout,
    conninfo,
    drop_unless_kept,
    emit,
    install_hard_timeout,
    log,
    package_version,
    recreate_database,
    server_settings,
)

DB = "bench_baseline"
ROWS = 100_000
UPDATE_SQL = "UPDATE bench_row SET n = n + 1 WHERE id = %s"


def parse_args() -> Any:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=5.0, help="duration of each measurement (default 5)")
    p.add_argument("--json", action="store_true", help="also print one JSON object per result line")
    p.add_argument("--no-pgbench", action="store_true", help="skip the pgbench rows")
    p.add_argument("--hard-timeout", type=float, default=120.0)
    p.add_argument("--keep-db", action="store_true")
    return p.parse_args()


def setup_table() -> None:
    import psycopg

    recreate_database(DB)
    with psycopg.connect(conninfo(DB), autocommit=True) as conn:
        conn.execute("CREATE TABLE bench_row (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)")
        conn.execute("INSERT INTO bench_row (id) SELECT g FROM generate_series(0, %s) g", (ROWS - 1,))
        conn.execute("VACUUM ANALYZE bench_row")


def psycopg_autocommit(seconds: float) -> tuple[int, float]:
    import psycopg

    with psycopg.connect(conninfo(DB), autocommit=True) as conn:
        for i in range(50):  # warm up; psycopg prepares the statement after 5 executions
            conn.execute(UPDATE_SQL, (i,))
        n = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while True:
            conn.execute(UPDATE_SQL, (n % ROWS,))
            n += 1
            if (n & 63) == 0 and time.perf_counter() >= deadline:
                break
        return n, time.perf_counter() - t0


def psycopg_one_transaction(seconds: float) -> tuple[int, float]:
    import psycopg

    with psycopg.connect(conninfo(DB), autocommit=False) as conn:
        for i in range(50):
            conn.execute(UPDATE_SQL, (i,))
        conn.commit()
        n = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while True:
            conn.execute(UPDATE_SQL, (n % ROWS,))
            n += 1
            if (n & 63) == 0 and time.perf_counter() >= deadline:
                break
        conn.commit()  # included in the measured time
        return n, time.perf_counter() - t0


def find_pgbench() -> str | None:
    for cand in ("/usr/lib/postgresql/15/bin/pgbench", shutil.which("pgbench")):
        if cand and os.path.exists(cand):
            return cand
    return None


def pgbench_run(pgbench: str, seconds: float, per_tx: int) -> tuple[int, float, str]:
    """Returns (statements, seconds, pgbench version) for one client, `per_tx` UPDATEs per transaction."""
    lines = [f"\\set id random(0, {ROWS - 1})"]
    if per_tx > 1:
        lines.append("BEGIN;")
    lines += ["UPDATE bench_row SET n = n + 1 WHERE id = :id;"] * per_tx
    if per_tx > 1:
        lines.append("COMMIT;")
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write("\n".join(lines) + "\n")
        script = f.name
    try:
        cmd = [
            pgbench,
            "-n",
            "-c",
            "1",
            "-j",
            "1",
            "-M",
            "prepared",
            "-T",
            str(round(seconds)),
            "-f",
            script,
            conninfo(DB),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30, check=True).stdout
        tx = int(re.search(r"number of transactions actually processed: (\d+)", out).group(1))  # type: ignore[union-attr]
        tps = float(re.search(r"tps = ([\d.]+)", out).group(1))  # type: ignore[union-attr]
        ver = subprocess.run([pgbench, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
        return tx * per_tx, (tx / tps if tps else float("nan")), ver
    finally:
        os.unlink(script)


def main() -> int:
    args = parse_args()
    install_hard_timeout(args.hard_timeout)
    settings = server_settings()
    pg = f"postgresql {settings['server_version'].split()[0]}"
    commit_note = (
        f"synchronous_commit={settings['synchronous_commit']}, fsync={settings['fsync']}, "
        f"wal_sync_method={settings['wal_sync_method']}"
    )
    psy = f"psycopg {package_version('psycopg')}"
    results: list[BenchResult] = []
    try:
        setup_table()
        n, s = psycopg_autocommit(args.seconds)
        log(f"psycopg autocommit: {n} updates in {s:.2f}s = {n / s:,.0f}/s")
        results.append(
            BenchResult(
                pg,
                f"{psy}, autocommit",
                n,
                s,
                n / s,
                float("nan"),
                float("nan"),
                f"1 UPDATE = 1 round trip + 1 commit; {commit_note}",
            )
        )
        n, s = psycopg_one_transaction(args.seconds)
        log(f"psycopg one transaction: {n} updates in {s:.2f}s = {n / s:,.0f}/s")
        results.append(
            BenchResult(
                pg,
                f"{psy}, one transaction",
                n,
                s,
                n / s,
                float("nan"),
                float("nan"),
                "all UPDATEs in one BEGIN..COMMIT: round trip only",
            )
        )
        pgbench = None if args.no_pgbench else find_pgbench()
        if pgbench:
            for per_tx, label, note in (
                (1, "pgbench -c1, autocommit", "1 UPDATE per transaction, -M prepared"),
                (100, "pgbench -c1, 100 per tx", "100 UPDATEs per BEGIN..COMMIT, -M prepared; statements/s"),
            ):
                n, s, ver = pgbench_run(pgbench, args.seconds, per_tx)
                log(f"{label}: {n} updates in {s:.2f}s = {n / s:,.0f}/s")
                results.append(BenchResult(pg, label, n, s, n / s, float("nan"), float("nan"), f"{note}; {ver}"))
        elif not args.no_pgbench:
            log("pgbench not found; skipping pgbench rows")
    finally:
        drop_unless_kept(DB, args.keep_db)
    cancel_hard_timeout()
    emit(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
