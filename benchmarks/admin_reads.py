"""The operator's reads at a large backlog: every Deck/API read, timed through the real FastAPI app.

Seeds N dead jobs (and ``--pending`` Pending jobs, a few hundred audit rows) with bulk SQL of its
own (a benchmark may: chokaq's code never writes rows this way), then times each read ``--calls``
times through ``TestClient(create_api(app))``: the routes, the models, the storage code and the
database as ``chokaq serve`` runs them, minus the socket. Also times the live stream's stats tick
(the snapshot the stream hub takes every ``Admin.EventPollInterval``) and reports its database
time per minute at the default 2 s interval.

    .venv/bin/python benchmarks/admin_reads.py --db postgresql --dead 1000,100000 --pending 100000
    .venv/bin/python benchmarks/admin_reads.py --db sqlite --dead 1000,100000

Timings are wall-clock milliseconds at the client, p50 and p95 (nearest rank) of ``--calls`` calls
after one warm-up call. They are not assertions: the machine this runs on is shared and noisy.
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


def time_calls(fn: Callable[[], Any], calls: int) -> list[float]:
    fn()  # warm-up: connections, caches
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def run(db: str, dead: int, pending: int, calls: int, tmp: Path) -> dict[str, tuple[float, float]]:
    url, drop = make_database(db, tmp)
    try:
        app = ChokaQ(storage_url=url, admin={"tokens": {TOKEN: {"name": "bench@example.com", "role": "admin"}}})
        app.storage.upgrade()
        took = seed(url, dead, pending)
        load = os.getloadavg()[0]
        print(f"# {db}: seeded {dead:,} dead + {pending:,} pending in {took:.1f} s (load {load:.1f})", file=sys.stderr)
        results: dict[str, tuple[float, float]] = {}
        with app.storage.engine.connect() as c:
            dead_id = c.execute(select(func.min(jobs_dlq.c.Id))).scalar_one()
        with TestClient(create_api(app)) as client:
            for label, path in READS:

                def call(path: str = path.format(dead_id=dead_id, dead_id_lower=dead_id.lower())) -> None:
                    r = client.get(path, headers=HEADERS)
                    if r.status_code != 200:
                        raise SystemExit(f"{path}: {r.status_code} {r.text[:200]}")

                xs = time_calls(call, calls)
                results[label] = (statistics.median(xs), pct(xs, 0.95))
            xs = time_calls(lambda: stats_snapshot(client.app.state.figures), calls)  # type: ignore[attr-defined]
            results["stream tick (stats snapshot)"] = (statistics.median(xs), pct(xs, 0.95))
            # What a large table's full count costs when it falls due (at most once a minute).
            # (A duty this large makes every read due: each call counts both tables in full.)
            recount = FiguresCache(app.storage, exact_limit=0, max_age=1e-9, duty=1e12)
            xs = time_calls(recount.read, calls)
            results["full recount (due at most every 60 s)"] = (statistics.median(xs), pct(xs, 0.95))
        app.close()
        print(f"# {db}: {dead:,} dead + {pending:,} pending read, load {os.getloadavg()[0]:.1f}", file=sys.stderr)
        return results
    finally:
        drop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", choices=["postgresql", "sqlite"], default="sqlite")
    ap.add_argument("--dead", default="1000,100000", help="comma-separated DLQ sizes")
    ap.add_argument("--pending", type=int, default=None, help="Pending jobs (default: a tenth of the DLQ)")
    ap.add_argument("--calls", type=int, default=9)
    args = ap.parse_args()
    sizes = [int(s.replace("_", "")) for s in args.dead.split(",")]
    table: dict[int, dict[str, tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            pending = args.pending if args.pending is not None else n // 10
            table[n] = run(args.db, n, pending, args.calls, Path(tmp))
    labels = list(next(iter(table.values())))
    head = " | ".join(f"{n:,} dead p50 / p95 ms" for n in sizes)
    print(f"\n{args.db}, {args.calls} calls each\n\n| read | {head} | p50 growth |")
    print("|---|" + "---|" * (len(sizes) + 1))
    for label in labels:
        cells = " | ".join(f"{table[n][label][0]:.1f} / {table[n][label][1]:.1f}" for n in sizes)
        growth = table[sizes[-1]][label][0] / max(table[sizes[0]][label][0], 1e-9)
        print(f"| {label} | {cells} | {growth:.1f}x |")

    def per_minute(n: int) -> float:
        """Ticks every 2 s plus the full recounts that fall due (every 60 s, or 50x their cost)."""
        tick = table[n]["stream tick (stats snapshot)"][0] / 1000
        full = table[n]["full recount (due at most every 60 s)"][0] / 1000
        return 30 * tick + full * 60 / max(60.0, 50 * full)

    per_min = ", ".join(f"{n:,}: {per_minute(n):.2f} s/min" for n in sizes)
    print(f"\nstream: database + client time per minute at one tick per 2 s (upper bound): {per_min}")


if __name__ == "__main__":
    main()
