"""One job's path through chokaq's modules, from ``app.enqueue`` to its archive row, on PostgreSQL.

    .venv/bin/python benchmarks/job_path.py [--root DIR] [--list]

Not a speed figure: a reading aid. It counts how often control moves from one chokaq module to
another while one job travels (``docs/architecture.md`` lists the path). Every call of a function
defined under ``chokaq/`` is an event; per thread, an event in a different module than the thread's
previous event is one boundary crossed. The producer's thread counts during ``app.enqueue`` only;
the worker's loop and its database threads count until the archive row exists (polled with a bare
psycopg connection, outside chokaq). A first job warms caches and lazy imports untraced; the second
is traced. Heartbeats, the statistics check and LISTEN are off: they are not the job's path.

``--root``: the checkout to import chokaq from (another worktree, to compare with an older commit).
Uses the database ``bench_job_path``, recreated each run.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any


class Tracer:
    """Module sequence per thread, from profile 'call' events of chokaq's own functions."""

    def __init__(self, package_dir: Path, producer: int) -> None:
        self.prefix = str(package_dir) + "/"
        self.producer = producer
        self.producing = False
        self.active = False  # set while the traced job travels
        self.last: dict[int, str] = {}
        self.crossings: list[tuple[str, str]] = []
        self.modules: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call" or not self.active:
            return
        path = frame.f_code.co_filename
        if not path.startswith(self.prefix):
            return
        thread = threading.get_ident()
        if thread == self.producer and not self.producing:
            return
        module = path[len(self.prefix) :]
        with self.lock:
            self.modules.add(module)
            before = self.last.get(thread)
            if before is not None and before != module:
                self.crossings.append((before, module))
            self.last[thread] = module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[1]))
    ap.add_argument("--url", default="postgresql+psycopg://postgres@127.0.0.1:5432/bench_job_path")
    ap.add_argument("--list", action="store_true", help="print every crossing in order")
    args = ap.parse_args()
    sys.path.insert(0, args.root)
    import psycopg

    import chokaq
    from chokaq import ChokaQ

    admin = "postgresql://postgres@127.0.0.1:5432/test"
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute("DROP DATABASE IF EXISTS bench_job_path WITH (FORCE)")
        c.execute("CREATE DATABASE bench_job_path")
    app = ChokaQ(
        storage_url=args.url,
        execution={"heartbeat_interval_min": 600, "heartbeat_interval_max": 900},
        recovery={"processing_zombie_timeout": 3600},
        storage={"listen_notify": False, "refresh_statistics": False, "polling_interval": 0.05},
    )
    app.storage.upgrade()

    @app.job("t")
    def handler(_ctx: Any) -> None:
        return None

    # Installed before any of the worker's threads start (a thread takes the profiler it starts with).
    tracer = Tracer(Path(chokaq.__file__).resolve().parent, threading.get_ident())
    threading.setprofile(tracer)
    worker = app.worker(concurrency=4)
    runner = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    runner.start()
    raw = psycopg.connect(args.url.replace("+psycopg", ""), autocommit=True)

    def archived(job_id: str) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if raw.execute('SELECT 1 FROM chokaq."JobsArchive" WHERE "Id" = %s', (job_id,)).fetchone():
                return
            time.sleep(0.002)
        raise SystemExit(f"job {job_id} was not archived within 30 s")

    archived(_enqueue(app))  # warm-up, untraced
    time.sleep(0.3)  # the warm-up job's completion and the worker's idle loop settle
    sys.setprofile(tracer)
    tracer.active = True
    try:
        tracer.producing = True
        job_id = _enqueue(app)
        tracer.producing = False
        archived(job_id)
    finally:
        tracer.active = False
        sys.setprofile(None)
    worker.stop()
    runner.join(30)
    raw.close()
    app.storage.close()

    edges = Counter(tracer.crossings)
    print(f"chokaq from {Path(chokaq.__file__).resolve().parent}")
    print(f"file boundaries crossed: {len(tracer.crossings)}; distinct module pairs: {len(edges)}; "
          f"modules entered: {len(tracer.modules)}")  # fmt: skip
    entered = Counter(b for _, b in tracer.crossings)
    print("entries per module:", ", ".join(f"{m} {n}" for m, n in entered.most_common()))
    if args.list:
        for a, b in tracer.crossings:
            print(f"  {a} -> {b}")


def _enqueue(app: Any) -> str:
    return str(app.enqueue("t", {}))


if __name__ == "__main__":
    main()
