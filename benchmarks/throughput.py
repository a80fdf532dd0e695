"""chokaq no-op throughput, enqueue->start latency and database round trips per job.

Run from the repo root with chokaq's venv (never in CI or tests):

    .venv/bin/python benchmarks/throughput.py --backend postgres --jobs 5000 --concurrency 10 \
        --rounds 3 --latency-jobs 200 [--json]
    .venv/bin/python benchmarks/throughput.py --backend sqlite ...

Same method as benchmarks/peers/*.py (see benchmarks/README.md), so figures are comparable:

* Throughput, per round: fresh database (PostgreSQL: ``bench_chokaq`` dropped and created via
  ``common.recreate_database``; SQLite: a new temp file), schema via ``Storage.upgrade()``, N no-op
  jobs stored with ``Storage.enqueue_many`` in chunks, then ONE in-process worker
  (``ChokaQ(storage_url=..., execution={concurrency: C, fetch_batch_size: 20})``, async no-op
  handler) is started in a thread. Time runs from starting the worker until the worker has
  committed all N successes (``Worker.counts.succeeded == N``: Processing -> Archive committed);
  afterwards JobsArchive is checked to hold N rows. jobs/s = N / median round time.
* Round trips: SQLAlchemy engine events count, between worker start and the last commit,
  every statement (``before_cursor_execute``), transaction (``begin``) and ``commit``. With
  psycopg 3 (non-autocommit) BEGIN and COMMIT are round trips of their own, so
  round trips = statements + begins + commits. A per-statement breakdown is printed.
  On PostgreSQL the server's own count of committed transactions for the benchmark database
  (``pg_stat_database.xact_commit``, whole round incl. schema setup and enqueue) is printed
  too: compare.py reads the same counter for the peers.
* Latency: fresh database, idle worker (1 s after start), M jobs enqueued one at a time with
  ``app.enqueue`` (INSERT + NOTIFY + commit) 20 ms apart; payload carries ``time.time()``; the
  handler takes ``time.perf_counter()`` at its first line and subtracts the ``perf_counter()``
  taken just before the enqueue call. PostgreSQL: the worker wakes on LISTEN/NOTIFY. SQLite
  has no notifications: the worker polls every ``Storage.PollingInterval`` (1 s default, i.e.
  ~500 ms expected median), so SQLite latency measures the poll interval, not the engine.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.peers.common import (
    PG_HOST,
    PG_PASSWORD,
    PG_PORT,
    PG_USER,
    BenchResult,
    CpuSampler,
    Stopwatch,
    analyze_table,
    base_parser,
    cancel_hard_timeout,
    conninfo,
    drop_database,
    install_hard_timeout,
    log,
    median,
    package_version,
    percentile,
    print_table,
    recreate_database,
)
from benchmarks.thread_profile import ThreadProfiles, report

DB = "bench_chokaq"
LATENCY_PATH = {
    ("postgres", "separate"): "NOTIFY",
    ("postgres", "same"): "in-process wake",
    ("sqlite", "separate"): "1 s polling",
    ("sqlite", "same"): "in-process wake",
}
ENQUEUE_CHUNK = 1000
PHASE_TIMEOUT = 120.0
LAT_TIMEOUT = 30.0


# --------------------------------------------------------------------------- databases


def pg_url(dbname: str) -> str:
    auth = PG_USER + (f":{PG_PASSWORD}" if PG_PASSWORD else "")
    return f"postgresql+psycopg://{auth}@{PG_HOST}:{PG_PORT}/{dbname}"


@contextmanager
def fresh_database(backend: str, dbname: str = DB, keep: bool = False) -> Iterator[str]:
    """Yield the URL of an empty database: PostgreSQL ``dbname`` recreated, or a temp SQLite file."""
    if backend == "postgres":
        recreate_database(dbname)
        try:
            yield pg_url(dbname)
        finally:
            if not keep:
                try:
                    drop_database(dbname)
                except Exception as exc:  # best effort
                    log(f"could not drop {dbname}: {exc!r}")
    else:
        d = tempfile.mkdtemp(prefix="chokaq-bench-")
        try:
            yield f"sqlite:///{d}/bench.db"
        finally:
            if not keep:
                shutil.rmtree(d, ignore_errors=True)


def server_commits(dbname: str) -> int | None:
    """pg_stat_database.xact_commit of *dbname* (call after every session has disconnected)."""
    import psycopg

    try:
        with psycopg.connect(conninfo("test"), autocommit=True) as conn:
            row = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (dbname,)).fetchone()
            return int(row[0]) if row else None
    except Exception as exc:  # informational only
        log(f"could not read pg_stat_database: {exc!r}")
        return None


# --------------------------------------------------------------------------- statement counting

_TABLE = re.compile(r'(?:FROM|INTO|UPDATE)\s+(?:[\w"]+\.)?"?(\w+)"?', re.IGNORECASE)


def classify(sql: str) -> str:
    """A short, stable label for a statement: verb + first table ('claim' and 'move' for the CTEs)."""
    s = sql.lstrip()
    head = s[:40].upper()
    if head.startswith("BEGIN"):
        return "BEGIN"
    if head.startswith("WITH") and "claim" in s[:200]:
        return "UPDATE JobsHot (fetch claim)"
    if head.startswith("WITH MOVED AS"):
        # PostgreSQL's one-statement move: DELETE ... RETURNING, INSERT into the target, counter upsert.
        target = "JobsArchive" if "JobsArchive" in s else "JobsDLQ" if "JobsDLQ" in s else "?"
        return f"move JobsHot -> {target} (1 statement)"
    if "pg_notify" in s[:60]:
        return "SELECT pg_notify"
    if "pg_stat_user_tables" in s:
        return "SELECT pg_stat_user_tables (statistics check)"
    verb = head.split(None, 1)[0] if head else "?"
    m = _TABLE.search(s)
    table = m.group(1) if m else ""
    if head.startswith("SELECT COUNT("):
        verb = "SELECT count(*)"
    label = f"{verb} {table}".strip()
    if verb == "UPDATE" and table == "JobsHot":
        set_part = s[s.upper().find(" SET ") : s.upper().find(" WHERE ")]
        if '"HeartbeatUtc"' in set_part and '"Status"' not in set_part:
            label += " (heartbeat)"
        elif '"AttemptCount"' in set_part and '"StartedAtUtc"' in set_part:
            label += " (start)"
    return label


def _autocommit(conn: Any) -> bool:
    try:
        return conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT"
    except Exception:
        return False


@dataclass
class StatementCounter:
    """Counts statements, transactions and commits on an engine via SQLAlchemy events.

    ``begins``/``commits``/``rollbacks`` count explicit transactions only (a connection in
    AUTOCOMMIT mode sends no BEGIN/COMMIT; each of its statements is a transaction of its own,
    counted in ``autocommit_statements``). The ``BEGIN IMMEDIATE`` that chokaq's SQLite engine
    issues from its begin hook is counted as the begin, not as a statement.
    """

    statements: int = 0
    autocommit_statements: int = 0
    begins: int = 0
    commits: int = 0
    rollbacks: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    rows_by_kind: Counter[str] = field(default_factory=Counter)
    captured: list[tuple[str, Any]] = field(default_factory=list)
    seconds_by_kind: dict[str, list[float]] = field(default_factory=dict)
    capture: Callable[[str], bool] | None = None
    timestamps: dict[str, list[float]] = field(default_factory=dict)
    active: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _engine: Any = None
    _executor: Any = None
    _loop_driver: Any = None

    def attach(self, engine: Any) -> StatementCounter:
        from sqlalchemy import event

        self._engine = engine
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)
        event.listen(engine, "begin", self._begin)
        event.listen(engine, "commit", self._commit)
        event.listen(engine, "rollback", self._rollback)
        return self

    def attach_executor(self, executor: Any) -> StatementCounter:
        """The hot path's executor sends its statements on the driver, past the engine's events:
        count them at its one execute call (autocommit statements; on SQLite each call or move is a
        BEGIN IMMEDIATE ... COMMIT of its own, counted as a begin and a commit)."""
        counter = self
        execute, transaction = executor._execute, executor.transaction
        sqlite = executor.dialect.name == "sqlite"

        def counted_execute(link: Any, stmt: Any, params: Any, **kw: Any) -> Any:
            if not counter.active:
                return execute(link, stmt, params, **kw)
            sql = executor.rendered(stmt, params).sql
            kind = classify(sql)
            t0 = time.perf_counter()
            rows, rc = execute(link, stmt, params, **kw)
            with counter._lock:
                counter.statements += 1
                counter.autocommit_statements += not sqlite
                counter.by_kind[kind] += 1
                counter.seconds_by_kind.setdefault(kind, []).append(time.perf_counter() - t0)
                if isinstance(rc, int) and rc > 0:
                    counter.rows_by_kind[kind] += rc
            return rows, rc

        @contextmanager
        def counted_transaction(*, sending: Callable[[], None]) -> Iterator[Any]:
            with transaction(sending=sending) as tx:
                if counter.active:
                    with counter._lock:
                        counter.begins += 1
                yield tx
            if counter.active:
                with counter._lock:
                    counter.commits += 1

        executor._execute, executor.transaction = counted_execute, counted_transaction
        self._executor = (executor, execute, transaction)
        self._attach_loop_driver()
        return self

    def _attach_loop_driver(self) -> None:
        """PostgreSQL's claims and completions on the worker's loop (storage/loop_transport.py) pass
        the threads' executor by: count them at the driver's one execute call, as autocommit
        statements. A checkout from before the loop driver (--baseline) has none."""
        try:
            from chokaq.storage.loop_transport import LoopTransport as loop_class
        except ImportError:
            try:  # a checkout from before the rename (--baseline)
                from chokaq.storage.loop_driver import LoopDriver as loop_class
            except ImportError:
                return
        counter = self
        execute = loop_class._execute

        async def counted(driver: Any, conn: Any, stmt: Any, params: Any, **kw: Any) -> Any:
            if not counter.active:
                return await execute(driver, conn, stmt, params, **kw)
            kind = classify(driver.executor.rendered(stmt, params).sql)
            t0 = time.perf_counter()
            rows = await execute(driver, conn, stmt, params, **kw)
            with counter._lock:
                counter.statements += 1
                counter.autocommit_statements += 1
                counter.by_kind[kind] += 1
                counter.seconds_by_kind.setdefault(kind, []).append(time.perf_counter() - t0)
                counter.rows_by_kind[kind] += len(rows)
            return rows

        loop_class._execute = counted  # type: ignore[method-assign]
        self._loop_driver = (loop_class, execute)

    def detach(self) -> None:
        from sqlalchemy import event

        if self._executor is not None:
            executor, execute, transaction = self._executor
            executor._execute, executor.transaction = execute, transaction
            self._executor = None
        if self._loop_driver is not None:
            driver_class, loop_execute = self._loop_driver
            driver_class._execute = loop_execute
            self._loop_driver = None
        if self._engine is None:
            return
        event.remove(self._engine, "before_cursor_execute", self._before)
        event.remove(self._engine, "after_cursor_execute", self._after)
        event.remove(self._engine, "begin", self._begin)
        event.remove(self._engine, "commit", self._commit)
        event.remove(self._engine, "rollback", self._rollback)
        self._engine = None

    def _before(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if not self.active:
            return
        kind = classify(statement)
        if kind == "BEGIN":
            return
        conn.info.setdefault("bench_t0", []).append(time.perf_counter())
        auto = _autocommit(conn)
        with self._lock:
            self.statements += 1
            self.autocommit_statements += auto
            self.by_kind[kind] += 1
            if kind in self.timestamps:
                self.timestamps[kind].append(time.monotonic())
            if self.capture is not None and self.capture(statement):
                self.captured.append((statement, parameters))

    def _after(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if not self.active:
            return
        kind = classify(statement)
        if kind == "BEGIN":
            return
        stack = conn.info.get("bench_t0")
        took = time.perf_counter() - stack.pop() if stack else math.nan
        rc = getattr(cursor, "rowcount", -1)
        with self._lock:
            self.seconds_by_kind.setdefault(kind, []).append(took)
            if isinstance(rc, int) and rc > 0:
                self.rows_by_kind[kind] += rc

    # In AUTOCOMMIT mode SQLAlchemy still fires begin/commit/rollback, but nothing is sent: the
    # statement is its own transaction. Only real transactions are counted here.
    def _begin(self, conn: Any) -> None:
        if self.active and not _autocommit(conn):
            with self._lock:
                self.begins += 1

    def _commit(self, conn: Any) -> None:
        if self.active and not _autocommit(conn):
            with self._lock:
                self.commits += 1

    def _rollback(self, conn: Any) -> None:
        if self.active and not _autocommit(conn):
            with self._lock:
                self.rollbacks += 1

    def reset(self) -> None:
        with self._lock:
            self.statements = self.autocommit_statements = self.begins = self.commits = self.rollbacks = 0
            self.by_kind.clear()
            self.rows_by_kind.clear()
            self.captured.clear()
            self.seconds_by_kind.clear()
            for v in self.timestamps.values():
                v.clear()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "statements": self.statements,
                "autocommit_statements": self.autocommit_statements,
                # server transactions: explicit ones + single statements in autocommit mode
                "transactions": self.commits + self.rollbacks + self.autocommit_statements,
                # BEGIN and COMMIT/ROLLBACK of an explicit transaction are round trips of their own
                "round_trips": self.statements + self.begins + self.commits + self.rollbacks,
                "begins": self.begins,
                "commits": self.commits,
                "rollbacks": self.rollbacks,
                "by_kind": dict(self.by_kind),
                "rows_by_kind": dict(self.rows_by_kind),
            }


# --------------------------------------------------------------------------- the app


def event_loop() -> str | None:
    """The worker's Execution.EventLoop here: uvloop, chokaq's documented fast setting (pgqueuer and
    oban-py run on uvloop here too), when it is installed and this checkout has the setting;
    CHOKAQ_BENCH_EVENT_LOOP=asyncio|uvloop overrides. None: the checkout predates the setting."""
    from chokaq.settings import ExecutionSettings

    if "event_loop" not in ExecutionSettings.model_fields:
        return None
    wanted = os.environ.get("CHOKAQ_BENCH_EVENT_LOOP")
    if wanted:
        return wanted
    import importlib.util

    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


def make_app(url: str, concurrency: int, batch: int, **extra: Any) -> Any:
    from chokaq import ChokaQ

    cfg: dict[str, Any] = {"execution": {"concurrency": concurrency, "fetch_batch_size": batch}}
    loop = event_loop()
    if loop is not None:
        cfg["execution"]["event_loop"] = loop
    for key, value in extra.items():
        cfg.setdefault(key, {}).update(value)
    app = ChokaQ(storage_url=url, **cfg)
    app.storage.upgrade()
    return app


class WorkerThread:
    """``app.worker(concurrency=C)`` running ``run(install_signals=False)`` in a thread."""

    def __init__(self, app: Any, concurrency: int) -> None:
        self.worker = app.worker(concurrency=concurrency)
        self.thread = threading.Thread(target=self.worker.run, kwargs={"install_signals": False}, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self.worker.stop()
        self.thread.join(timeout)
        if self.thread.is_alive():
            log(f"WARNING: worker did not stop within {timeout:.0f}s")


def enqueue_noops(app: Any, n: int, type_: str = "noop") -> float:
    from chokaq.domain.models import EnqueueRequest

    with Stopwatch() as sw:
        for start in range(0, n, ENQUEUE_CHUNK):
            reqs = [EnqueueRequest(type=type_, payload="{}") for _ in range(min(ENQUEUE_CHUNK, n - start))]
            app.storage.enqueue_many(reqs)
    return sw.seconds


def archive_count(app: Any) -> int:
    from sqlalchemy import func, select

    from chokaq.storage.schema import jobs_archive

    return int(app.storage.read(lambda c: c.execute(select(func.count()).select_from(jobs_archive)).scalar_one()))


# --------------------------------------------------------------------------- phases


@dataclass
class Drain:
    """What one timed drain measured: wall seconds and this process's CPU seconds, and the machine's note."""

    started: float  # perf_counter() at worker start
    seconds: float
    cpu_seconds: float
    sampler: CpuSampler


def noop_app(url: str, n: int, concurrency: int, batch: int) -> tuple[Any, dict[str, Any]]:
    """An app with an async no-op handler that records its first start and sets ``done`` at the N-th."""
    app = make_app(url, concurrency, batch)
    state: dict[str, Any] = {"seen": 0, "first": 0.0, "done": threading.Event()}

    # CHOKAQ_BENCH_LOG_LINES=k: each job logs k lines with ctx.log (docs/job-logs.md), written
    # with the heartbeat and the archive; unset or 0: the plain no-op, which takes no context.
    lines = int(os.environ.get("CHOKAQ_BENCH_LOG_LINES", "0") or 0)

    def seen() -> None:
        if not state["seen"]:
            state["first"] = time.perf_counter()
        state["seen"] += 1
        if state["seen"] >= n:
            state["done"].set()

    if lines:

        @app.job("noop")
        async def noop_logging(payload: Any, ctx: Any) -> None:
            for i in range(lines):
                ctx.log("processed", item=i)
            seen()
    else:

        @app.job("noop")
        async def noop(payload: Any) -> None:
            seen()

    # CHOKAQ_BENCH_IDLE_SCHEDULES=N: N schedules that never fall due during a round (the worker
    # still polls for due ones), to show what defining schedules costs the hot path. A checkout
    # from before schedules has no app.schedule and runs without them.
    for i in range(int(os.environ.get("CHOKAQ_BENCH_IDLE_SCHEDULES", "0"))):
        if hasattr(app, "schedule"):
            app.schedule(f"idle-{i}", "0 0 1 1 *", job="noop")
    return app, state


def wait_all_succeeded(wt: WorkerThread, state: dict[str, Any], n: int, rnd: int) -> None:
    """Until the handler has run N times and the worker has committed N successes."""
    if not state["done"].wait(PHASE_TIMEOUT):
        raise TimeoutError(f"round {rnd}: handler saw {state['seen']}/{n} in {PHASE_TIMEOUT:.0f}s")
    deadline = time.monotonic() + 30
    while wt.worker.counts.succeeded < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"round {rnd}: {wt.worker.counts} after 30 s")
        time.sleep(0.001)


def timed_drain(
    wt: WorkerThread, state: dict[str, Any], n: int, rnd: int, dbname: str | None, counter: StatementCounter | None
) -> Drain:
    """Start the worker and time it until all N are committed; the counter (if any) counts only inside."""
    try:
        with CpuSampler(dbname) as cpu:
            if counter is not None:
                counter.active = True
            t0 = time.perf_counter()
            cpu0 = time.process_time()
            wt.start()
            wait_all_succeeded(wt, state, n, rnd)
            t1 = time.perf_counter()
            cpu1 = time.process_time()
    finally:
        if counter is not None:
            counter.active = False
        wt.stop()
    return Drain(t0, t1 - t0, cpu1 - cpu0, cpu)


def throughput_round(
    backend: str, n: int, concurrency: int, batch: int, rnd: int, analyze: bool = False, count: bool = False
) -> dict[str, Any]:
    """One round. ``count=True`` attaches the statement counter: its engine hooks cost the worker
    a few per cent, so timed rounds run without it and one extra round counts."""
    pg = backend == "postgres"
    with fresh_database(backend) as url:
        app, state = noop_app(url, n, concurrency, batch)
        enqueue_s = enqueue_noops(app, n)
        if analyze and pg:
            analyze_table(DB, 'chokaq."JobsHot"')
        counter = StatementCounter().attach(app.storage.engine) if count else None
        try:
            if counter is not None and getattr(getattr(app.storage, "tx", None), "executor", None) is not None:
                counter.attach_executor(app.storage.tx.executor)
            wt = WorkerThread(app, concurrency)
            drain = timed_drain(wt, state, n, rnd, DB if pg else None, counter)
            counts = counter.snapshot() if counter is not None else None
        finally:
            # The loop driver's counter is patched on its class: never left on after a failed round.
            if counter is not None:
                counter.detach()
        archived = archive_count(app)
        if archived != n:
            log(f"WARNING round {rnd}: JobsArchive has {archived} rows, expected {n}")
        stats = wt.worker.counts.as_dict()
        app.close()
        commits = None
        if pg:
            time.sleep(0.5)  # let the backends exit; they flush their statistics on exit
            commits = server_commits(DB)
    cpu = drain.sampler
    server = cpu.per_job(n) if pg else {}  # SQLite has no server: only this process
    first, t1 = state["first"], drain.started + drain.seconds
    return {
        "seconds": drain.seconds,
        "enqueue_s": enqueue_s,
        "startup_s": first - drain.started,
        "steady_rate": (n - 1) / (t1 - first) if t1 > first else math.nan,
        "cpu": cpu.note(),
        "loadavg": cpu.loadavg,
        "counts": counts,
        # CPU time of this process (all threads) per job: the worker's own cost, steadier than jobs/s.
        "cpu_us_per_job": drain.cpu_seconds / n * 1e6,
        "server_cpu_us_per_job": server.get("server_cpu_us_per_job", math.nan),
        "server_db_cpu_us_per_job": server.get("server_db_cpu_us_per_job", math.nan),
        "worker_stats": stats,
        "server_commits": commits,
    }


def profile_round(args: Any) -> list[str]:
    """``--profile``: one plain round for reference, then one round with every worker thread under
    cProfile (benchmarks/thread_profile.py); returns the report lines."""
    n, c, b = args.jobs, args.concurrency, args.batch_size
    ref = throughput_round(args.backend, n, c, b, 1, args.analyze)
    log(f"reference round: {n / ref['seconds']:,.0f} jobs/s, {ref['cpu_us_per_job']:.1f} us CPU/job; {ref['cpu']}")
    pg = args.backend == "postgres"
    with fresh_database(args.backend) as url:
        app, state = noop_app(url, n, c, b)
        enqueue_noops(app, n)
        if args.analyze and pg:
            analyze_table(DB, 'chokaq."JobsHot"')
        with ThreadProfiles() as tp:
            wt = WorkerThread(app, c)
            drain = timed_drain(wt, state, n, 2, DB if pg else None, None)
            app.close()
        left = tp.join()
    log(f"profiled round: {n / drain.seconds:,.0f} jobs/s, {drain.cpu_seconds / n * 1e6:.1f} us CPU/job")
    head = [
        f"chokaq {args.backend} C={c}, N={n}, fetch batch {b}, "
        f"{'queue table ANALYZEd' if args.analyze else 'fresh queue table'}; git {git_rev()}; "
        f"load {os.getloadavg()[0]:.2f}",
    ]
    if left:
        head.append(f"(threads still running, not counted: {', '.join(left)})")
    merged = tp.stats()
    if args.profile_out and merged is not None:
        merged.dump_stats(args.profile_out)  # for `python -m pstats FILE` or snakeviz
        head.append(f"(merged profile of all threads written to {args.profile_out})")
    return head + report(tp, n, drain.cpu_seconds / n * 1e6, ref["cpu_us_per_job"])


def latency_phase(
    backend: str, m: int, concurrency: int, batch: int, gap_ms: float, producer: str = "separate"
) -> tuple[list[float], list[float]]:
    """``producer="separate"``: jobs are enqueued through a second ChokaQ app (its own Storage and
    pool), like a web process would: the worker learns of them by NOTIFY (PostgreSQL) or its next
    poll (SQLite). ``"same"``: through the worker's own app, whose Storage also wakes workers of
    the same process directly (``Storage.on_enqueue``)."""
    from chokaq import ChokaQ

    with fresh_database(backend) as url:
        app = make_app(url, concurrency, batch)
        prod = ChokaQ(storage_url=url) if producer == "separate" else app
        lat_pc: list[float] = []
        lat_wall: list[float] = []
        enq_pc: dict[int, float] = {}
        done = threading.Event()

        @app.job("lat")
        async def lat(payload: Any) -> None:
            started = time.perf_counter()
            wall = time.time()
            lat_pc.append((started - enq_pc[payload["i"]]) * 1000.0)
            lat_wall.append((wall - payload["t"]) * 1000.0)
            if len(lat_pc) >= m:
                done.set()

        wt = WorkerThread(app, concurrency)
        wt.start()
        try:
            time.sleep(1.0)  # idle worker (LISTENing on PostgreSQL)
            for i in range(m):
                enq_pc[i] = time.perf_counter()
                prod.enqueue("lat", {"i": i, "t": time.time()})
                time.sleep(gap_ms / 1000.0)
            if not done.wait(LAT_TIMEOUT):
                raise TimeoutError(f"latency: {len(lat_pc)}/{m} jobs started within {LAT_TIMEOUT:.0f}s")
        finally:
            wt.stop()
            app.close()
            prod.close()
            if backend == "postgres":
                time.sleep(0.6)  # the LISTEN thread notices the stop within 0.5 s and disconnects
    return lat_pc, lat_wall


# --------------------------------------------------------------------------- results


def git_rev() -> str:
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "chokaq"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return rev + ("+dirty(chokaq/)" if dirty else "")
    except Exception:
        return "unknown"


def versions() -> dict[str, str]:
    return {
        "chokaq": package_version("chokaq"),
        "git": git_rev(),
        "sqlalchemy": package_version("sqlalchemy"),
        "psycopg": package_version("psycopg"),
        "python": sys.version.split()[0],
        "event_loop": event_loop() or "asyncio (no Execution.EventLoop)",
    }


def backend_label(backend: str) -> str:
    v = versions()
    if backend == "postgres":
        return f"postgresql+psycopg {v['psycopg']}"
    import sqlite3

    return f"sqlite {sqlite3.sqlite_version}"


def per_job(rounds: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """Median per-job counts over rounds, plus the statement breakdown of the median round."""
    stmts = median(r["counts"]["statements"] / n for r in rounds)
    begins = median(r["counts"]["begins"] / n for r in rounds)
    txs = median(r["counts"]["transactions"] / n for r in rounds)
    rts = median(r["counts"]["round_trips"] / n for r in rounds)
    srv = [r["server_commits"] / n for r in rounds if r.get("server_commits")]
    mid = sorted(rounds, key=lambda r: r["seconds"])[len(rounds) // 2]
    kinds = mid["counts"]["by_kind"]
    rows = mid["counts"]["rows_by_kind"]
    breakdown = ", ".join(
        f"{k} {v / n:.3f}/job" + (f" (avg {rows.get(k, 0) / v:.1f} rows)" if rows.get(k) else "")
        for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])
    )
    return {
        "stmts_per_job": stmts,
        "tx_per_job": txs,
        "begins_per_job": begins,
        "round_trips_per_job": rts,
        "server_tx_per_job": median(srv) if srv else None,
        "breakdown": breakdown,
    }


def run(args: Any, backend: str, concurrency: int) -> list[tuple[BenchResult, dict[str, Any]]]:
    """Throughput (median of rounds) and latency rows for one backend and concurrency."""
    name = f"chokaq {package_version('chokaq')}"
    label = backend_label(backend)
    pg = backend == "postgres"
    poll = "LISTEN/NOTIFY" if pg else "polling every Storage.PollingInterval (1 s)"
    settings_note = (
        f"concurrency={concurrency}, fetch_batch_size={args.batch_size}, prefetch=100 (default), "
        f"one worker in-process, {poll}"
    )
    out: list[tuple[BenchResult, dict[str, Any]]] = []
    if args.jobs > 0 and args.rounds > 0:
        rounds = []
        for r in range(1, args.rounds + 1):
            res = throughput_round(backend, args.jobs, concurrency, args.batch_size, r, args.analyze)
            rounds.append(res)
            log(
                f"chokaq {backend} C={concurrency} round {r}: {args.jobs} jobs in {res['seconds']:.3f}s = "
                f"{args.jobs / res['seconds']:,.0f} jobs/s (first start->all archived "
                f"{res['steady_rate']:,.0f}/s; enqueue {res['enqueue_s']:.2f}s; "
                f"{res['cpu_us_per_job']:.0f} us CPU/job in this process; load {res['loadavg']:.2f}; {res['cpu']})"
            )
        counted = throughput_round(backend, args.jobs, concurrency, args.batch_size, 0, args.analyze, count=True)
        c = counted["counts"]
        log(
            f"chokaq {backend} C={concurrency} counting round (not timed): {c['statements']} statements, "
            f"{c['transactions']} transactions, {c['round_trips']} round trips"
        )
        pj = per_job([counted], args.jobs)
        med = median(r["seconds"] for r in rounds)
        per_round = ", ".join(f"{args.jobs / r['seconds']:,.0f}" for r in rounds)
        srv = f"{pj['server_tx_per_job']:.2f}" if pj["server_tx_per_job"] is not None else "n/a"
        notes = (
            f"worker start -> all {args.jobs} archived, median of {len(rounds)} rounds (per round jobs/s: "
            f"{per_round}); worker process CPU median {median(r['cpu_us_per_job'] for r in rounds):.0f} us/job"
            + (f", postgres CPU median {median(r['server_cpu_us_per_job'] for r in rounds):.0f} us/job" if pg else "")
            + "; "
            + f"{'queue table ANALYZEd after enqueue' if args.analyze else 'queue table never ANALYZEd'}; "
            f"first job start -> all archived median "
            f"{median(r['steady_rate'] for r in rounds):,.0f} jobs/s; worker startup median "
            f"{median(r['startup_s'] for r in rounds) * 1000:.0f} ms; bulk enqueue median "
            f"{median(r['enqueue_s'] for r in rounds):.2f}s; per job: {pj['stmts_per_job']:.3f} statements, "
            f"{pj['tx_per_job']:.3f} transactions, {pj['round_trips_per_job']:.3f} round trips "
            f"(statements + BEGIN + COMMIT of explicit transactions; from one extra counting round); "
            f"server xact_commit/job (whole round) {srv}; "
            f"breakdown: {pj['breakdown']}; {settings_note}; "
            + "; ".join(f"r{i + 1} load {r['loadavg']:.2f}, {r['cpu']}" for i, r in enumerate(rounds))
        )
        res = BenchResult(name, label, args.jobs, med, args.jobs / med, math.nan, math.nan, notes)
        extra = {
            **{k: v for k, v in pj.items() if k != "breakdown"},
            "concurrency": concurrency,
            "kind": "throughput",
            "loadavg": median(r["loadavg"] for r in rounds),
            "per_round_jobs_per_s": [args.jobs / r["seconds"] for r in rounds],
            "steady_jobs_per_s": median(r["steady_rate"] for r in rounds),
            "cpu_us_per_job": median(r["cpu_us_per_job"] for r in rounds),
            "server_cpu_us_per_job": median(r["server_cpu_us_per_job"] for r in rounds),
            "server_db_cpu_us_per_job": median(r["server_db_cpu_us_per_job"] for r in rounds),
            "analyze": args.analyze,
        }
        out.append((res, extra))
    for producer in ("separate", "same") if args.latency_jobs > 0 else ():
        load0 = os.getloadavg()[0]
        with Stopwatch() as sw:
            lat, wall = latency_phase(backend, args.latency_jobs, concurrency, args.batch_size, args.gap_ms, producer)
        p50, p99 = percentile(lat, 50), percentile(lat, 99)
        how = LATENCY_PATH[(backend, producer)]
        log(
            f"chokaq {backend} latency ({how}): {len(lat)} samples, p50 {p50:.2f} ms, p99 {p99:.2f} ms "
            f"(load {load0:.2f})"
        )
        res = BenchResult(
            name,
            f"{label} ({how})",
            len(lat),
            sw.seconds,
            math.nan,
            p50,
            p99,
            f"latency enqueue->handler start, one job per {args.gap_ms:g} ms on an idle worker, producer: "
            f"{producer} app (max {max(lat):.2f} ms; wall-clock time.time() p50 {percentile(wall, 50):.2f} ms); "
            f"{settings_note}; load {load0:.2f}",
        )
        out.append((res, {"concurrency": concurrency, "kind": "latency", "producer": producer, "loadavg": load0}))
    return out


def to_json(res: BenchResult, extra: dict[str, Any]) -> str:
    d = json.loads(res.to_json())
    d.update(extra)
    return json.dumps(d)


def parse_args(argv: list[str] | None = None) -> Any:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--backend", choices=["postgres", "sqlite"], default="postgres")
    p.add_argument(
        "--profile",
        action="store_true",
        help="one round with every worker thread under cProfile: per-job CPU by component (see benchmarks/README.md)",
    )
    p.add_argument("--profile-out", help="with --profile: also write the merged pstats file here")
    p.set_defaults(hard_timeout=600.0)
    return p.parse_args(argv)


def main() -> int:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING)
    install_hard_timeout(args.hard_timeout)
    log(f"load average (1 min) at start: {os.getloadavg()[0]:.2f}; versions {versions()}")
    if args.profile:
        print("\n".join(profile_round(args)))
        cancel_hard_timeout()
        return 0
    results = run(args, args.backend, args.concurrency)
    cancel_hard_timeout()
    print_table([r for r, _ in results])
    if args.json:
        for r, extra in results:
            print(to_json(r, extra))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
