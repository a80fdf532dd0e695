"""The operator's reads at a large backlog: every Deck/API read, timed through the real FastAPI app.

Seeds N dead jobs (and ``--pending`` Pending jobs, a few hundred audit rows) with bulk SQL of its
own (a benchmark may: chokaq's code never writes rows this way), then times each read ``--calls``
times through ``TestClient(create_api(app))``: the routes, the models, the storage code and the
database as ``chokaq serve`` runs them, minus the socket. Also times the live stream's stats tick
(the snapshot the stream hub takes every ``Admin.EventPollInterval``) and reports its database
time per minute at the default 2 s interval.

    .venv/bin/python benchmarks/admin_reads.py --db postgresql --dead 1000,100000 --pending 100000
    .venv/bin/python benchmarks/admin_reads.py --db sqlite --dead 1000,100000
    .venv/bin/python benchmarks/admin_reads.py --db postgresql --setups 1000:100,1000000:100000,1000:1000000

Timings are wall-clock milliseconds at the client, p50 and p95 (nearest rank) of ``--calls`` calls
after one warm-up call, the setups' calls interleaved. They are not assertions: the machine this runs
on is shared and noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, func, select, text

from chokaq import ChokaQ
from chokaq.api import create_api
from chokaq.api.events import stats_snapshot
from chokaq.storage.figures_cache import FiguresCache
from chokaq.storage.schema import jobs_dlq

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
TOKEN = "bench-admin-token-0123456789"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
QUEUES = 5
TYPES = 50
NEEDLE = "upstream 421 refused"

# (label, path): every read the Deck's views make, with each DLQ filter.
READS: list[tuple[str, str]] = [
    ("GET /api/stats", "/api/stats"),
    ("GET /api/dlq (first page)", "/api/dlq?page_size=100"),
    ("GET /api/dlq?type=", "/api/dlq?type=type_7"),
    ("GET /api/dlq?queue=", "/api/dlq?queue=q3"),
    ("GET /api/dlq?failure_reason=", "/api/dlq?failure_reason=Timeout"),
    ("GET /api/dlq?search= (error text)", "/api/dlq?search=" + NEEDLE.replace(" ", "%20")),
    ("GET /api/dlq?search= (whole id, lower case)", "/api/dlq?search={dead_id_lower}"),
    ("GET /api/dlq/{id} (inspector)", "/api/dlq/{dead_id}"),
    ("GET /api/jobs (Pending page)", "/api/jobs?page_size=100"),
    ("GET /api/jobs?sort=id (the Deck's hot list)", "/api/jobs?sort=id&page_size=100"),
    ("GET /api/jobs?sort=id&queue= (Deck)", "/api/jobs?sort=id&queue=q3"),
    ("GET /api/jobs?sort=id&type= (Deck)", "/api/jobs?sort=id&type=type_7"),
    ("GET /api/jobs?sort=id&status=Pending (Deck)", "/api/jobs?sort=id&status=Pending"),
    ("GET /api/jobs?queue= (Pending)", "/api/jobs?queue=q3"),
    ("GET /api/jobs?type= (Pending)", "/api/jobs?type=type_7"),
    ("GET /api/jobs?search= (Pending)", "/api/jobs?search=PEND0000000000000000042"),
    ("GET /api/jobs?location=archive", "/api/jobs?location=archive"),
    ("GET /api/stats/history?window=1h", "/api/stats/history?window=1h"),
    ("GET /api/audit", "/api/audit"),
]


def seed_sql(dialect: str, dead: int, pending: int) -> list[str]:
    """Bulk INSERT ... SELECT over a generated series: seconds for a million rows."""
    if dialect == "postgresql":
        series = "SELECT g AS i FROM generate_series(1, {n}) AS g"
        now = "(now() AT TIME ZONE 'utc')"
        ago = "{now} - make_interval(secs => i)"
        pad = "lpad(i::text, 20, '0')"
        # ULID-like: 26 characters, as random as a ULID's (a zero-padded counter would make every
        # id share most of its trigrams, which no real id does).
        ident = "'01' || upper(substr(md5(i::text), 1, 24))"
        cat = "||"
    else:
        series = "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n}) SELECT i FROM s"
        now = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
        ago = "strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || i || ' seconds')"
        pad = "printf('%020d', i)"
        ident = "'01' || upper(hex(randomblob(12)))"
        cat = "||"
    ago = ago.format(now=now)
    schema = '"chokaq".' if dialect == "postgresql" else ""  # SQLite: chokaq's tables carry no schema
    error = (
        f"CASE WHEN i % 997 = 0 THEN 'SMTPError: {NEEDLE} for relay ' {cat} (i % 13) "
        f"ELSE 'ValueError: row ' {cat} i {cat} ' failed validation in step ' {cat} (i % 17) END"
    )
    dlq = (
        f'INSERT INTO {schema}"JobsDLQ" ("Id", "Queue", "Type", "Payload", "Tags", "FailureReason", '
        '"ErrorDetails", "AttemptCount", "WorkerId", "CreatedAtUtc", "FailedAtUtc") '
        f"SELECT {ident}, 'q' {cat} (i % {QUEUES}), 'type_' {cat} (i % {TYPES}), "
        f"'{{\"n\": ' {cat} i {cat} '}}', 'tenant-' {cat} (i % 100), i % 11, {error}, 3, 'w-' {cat} (i % 8), "
        f"{ago}, {ago} FROM ({series.format(n=dead)}) AS s"
    )
    hot = (
        f'INSERT INTO {schema}"JobsHot" ("Id", "Queue", "Type", "Payload", "Priority", "Status", '
        '"AttemptCount", "ScheduledAtUtc", "CreatedAtUtc", "LastUpdatedUtc") '
        f"SELECT 'PEND' {cat} {pad}, 'q' {cat} (i % {QUEUES}), 'type_' {cat} (i % {TYPES}), '{{}}', 10, 0, 0, "
        f"{ago}, {ago}, {ago} FROM ({series.format(n=pending)}) AS s"
    )
    audit = (
        f'INSERT INTO {schema}"AuditLog" ("AtUtc", "Actor", "Role", "Action", "JobIds", "JobCount") '
        f"SELECT {ago}, 'ops@example.com', 'operator', 'dlq.purge', '[\"DEAD' {cat} {pad} {cat} '\"]', 1 "
        f"FROM ({series.format(n=300)}) AS s"
    )
    return [s for s, n in ((dlq, dead), (hot, pending), (audit, 300)) if n]


def make_database(db: str, tmp: Path) -> tuple[str, Callable[[], None]]:
    if db == "sqlite":
        return f"sqlite:///{tmp / f'bench-{uuid.uuid4().hex[:6]}.db'}", lambda: None
    name = f"chokaq_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))

    def drop() -> None:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return PG_ADMIN.rsplit("/", 1)[0] + "/" + name, drop


def seed(url: str, dead: int, pending: int) -> float:
    t0 = time.perf_counter()
    eng = create_engine(url)
    with eng.begin() as c:
        for stmt in seed_sql(eng.dialect.name, dead, pending):
            c.execute(text(stmt))
    with eng.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        # Statistics (and GIN pending lists merged) as autovacuum would have them on a
        # long-lived database; a bulk load leaves them for the next autovacuum.
        c.execute(text("VACUUM ANALYZE" if eng.dialect.name == "postgresql" else "ANALYZE"))
    eng.dispose()
    return time.perf_counter() - t0


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p * len(s) + 0.5) - 1))]


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


Setup = tuple[int, int]  # (dead, pending)


class Target:
    """One seeded database with the API over it, kept open while every setup is timed."""

    def __init__(self, db: str, dead: int, pending: int, tmp: Path) -> None:
        self.url, self.drop = make_database(db, tmp)
        self.app = ChokaQ(
            storage_url=self.url, admin={"tokens": {TOKEN: {"name": "bench@example.com", "role": "admin"}}}
        )
        self.app.storage.upgrade()
        took = seed(self.url, dead, pending)
        load = os.getloadavg()[0]
        print(f"# {db}: seeded {dead:,} dead + {pending:,} pending in {took:.1f} s (load {load:.1f})", file=sys.stderr)
        with self.app.storage.engine.connect() as c:
            self.dead_id = c.execute(select(func.min(jobs_dlq.c.Id))).scalar_one()
        self.client = TestClient(create_api(self.app))
        self.client.__enter__()

    def calls(self) -> dict[str, Callable[[], Any]]:
        out: dict[str, Callable[[], Any]] = {}
        for label, path in READS:

            def call(path: str = path.format(dead_id=self.dead_id, dead_id_lower=self.dead_id.lower())) -> None:
                r = self.client.get(path, headers=HEADERS)
                if r.status_code != 200:
                    raise SystemExit(f"{path}: {r.status_code} {r.text[:200]}")

            out[label] = call
        out["stream tick (stats snapshot)"] = lambda: stats_snapshot(self.client.app.state.figures)  # type: ignore[attr-defined]
        # What a large table's full count costs when it falls due (at most once a minute).
        # (A duty this large makes every read due: each call counts both tables in full.)
        recount = FiguresCache(self.app.storage, exact_limit=0, max_age=1e-9, duty=1e12)
        out["full recount (due at most every 60 s)"] = recount.read
        return out

    def close(self) -> None:
        self.client.__exit__(None, None, None)
        self.app.close()
        self.drop()


def run(db: str, setups: list[Setup], calls: int, tmp: Path) -> dict[Setup, dict[str, tuple[float, float]]]:
    """Every setup seeded first, then each read timed in rounds that visit every setup in turn:
    on a shared machine the load drifts over minutes, and interleaving puts the same drift into
    every column of a row."""
    targets: list[Target] = []
    try:
        for dead, pending in setups:
            targets.append(Target(db, dead, pending, tmp))
        fns = [t.calls() for t in targets]
        results: dict[Setup, dict[str, tuple[float, float]]] = {s: {} for s in setups}
        for label in fns[0]:
            for f in fns:
                f[label]()  # warm-up: connections, caches
            xs: list[list[float]] = [[] for _ in setups]
            for _ in range(calls):
                for i, f in enumerate(fns):
                    xs[i].append(timed(f[label]))
            for i, setup in enumerate(setups):
                results[setup][label] = (statistics.median(xs[i]), pct(xs[i], 0.95))
            print(f"# {label}: load {os.getloadavg()[0]:.1f}", file=sys.stderr)
        return results
    finally:
        for t in targets:
            t.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", choices=["postgresql", "sqlite"], default="sqlite")
    ap.add_argument("--dead", default="1000,100000", help="comma-separated DLQ sizes")
    ap.add_argument("--pending", type=int, default=None, help="Pending jobs (default: a tenth of the DLQ)")
    ap.add_argument(
        "--setups", default=None, help="comma-separated dead:pending pairs instead of --dead/--pending (1000:100,...)"
    )
    ap.add_argument("--calls", type=int, default=9)
    args = ap.parse_args()
    if args.setups:
        setups = [(int(a), int(b)) for a, b in (p.replace("_", "").split(":") for p in args.setups.split(","))]
    else:
        sizes = [int(s.replace("_", "")) for s in args.dead.split(",")]
        setups = [(n, args.pending if args.pending is not None else n // 10) for n in sizes]
    print(f"# load before: {os.getloadavg()[0]:.1f}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        table = run(args.db, setups, args.calls, Path(tmp))
    labels = list(next(iter(table.values())))
    head = " | ".join(f"{d:,} dead + {p:,} pending p50 / p95 ms" for d, p in setups)
    growth = " | ".join(f"p50 x ({d:,}/{p:,})" for d, p in setups[1:])
    print(f"\n{args.db}, {args.calls} interleaved calls each\n\n| read | {head} | {growth} |")
    print("|---|" + "---|" * (2 * len(setups) - 1))
    base = setups[0]
    for label in labels:
        cells = " | ".join(f"{table[s][label][0]:.1f} / {table[s][label][1]:.1f}" for s in setups)
        ratios = " | ".join(f"{table[s][label][0] / max(table[base][label][0], 1e-9):.1f}x" for s in setups[1:])
        print(f"| {label} | {cells} | {ratios} |")

    def per_minute(s: Setup) -> float:
        """Ticks every 2 s plus the full recounts that fall due (every 60 s, or 50x their cost)."""
        tick = table[s]["stream tick (stats snapshot)"][0] / 1000
        full = table[s]["full recount (due at most every 60 s)"][0] / 1000
        return 30 * tick + full * 60 / max(60.0, 50 * full)

    per_min = ", ".join(f"{d:,}/{p:,}: {per_minute((d, p)):.2f} s/min" for d, p in setups)
    print(f"\nstream: database + client time per minute at one tick per 2 s (upper bound): {per_min}")
    print(f"# load after: {os.getloadavg()[0]:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
