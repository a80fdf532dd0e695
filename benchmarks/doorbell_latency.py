"""Enqueue -> handler start through the Functions doorbell, with `wake` invoked as soon as the
message is visible (what the Functions host's queue listener does at its shortest polling).

A real Azurite (queue service) and a real database; the producer is its own ChokaQ app (its own
Storage, so no in-process wake-up helps), and `wake` is the function registered by
``build_function_app``, invoked with a ``func.QueueMessage`` built by the library's own converter.
Every sample starts from no running slice (idle end 0.2 s, enqueues spaced past the coalescing
interval): the cold path of the doorbell, slice start included.

    .venv/bin/python benchmarks/doorbell_latency.py --samples 100
    .venv/bin/python benchmarks/doorbell_latency.py --db postgresql+psycopg://postgres@127.0.0.1:5432/test

Not included (Azure only): the host's own polling back-off (host.json ``maxPollingInterval``, 2 s
here), scale-from-zero and cold starts of an instance.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument(
        "--db",
        default="",
        help="SQLAlchemy URL (default: a SQLite file in a temp dir); a "
        "postgresql URL gets a fresh database created next to it",
    )
    ap.add_argument("--poll", type=float, default=0.01, help="seconds between queue polls")
    args = ap.parse_args()

    from azure.functions import meta
    from azure.functions.queue import QueueMessageInConverter
    from azure.storage.queue import QueueClient, TextBase64DecodePolicy

    from chokaq import ChokaQ
    from functions import build_function_app
    from functions.doorbell import install
    from tests.functions.conftest import start_azurite

    tmp = Path(tempfile.mkdtemp(prefix="chokaq-doorbell-bench-"))
    azurite = start_azurite(tmp / "azurite")
    drop = None
    if args.db.startswith("postgresql"):
        import os

        os.environ["CHOKAQ_TEST_PG_URL"] = args.db
        from tests.conftest import drop_pg_database, fresh_pg_database

        url = fresh_pg_database()
        drop = lambda: drop_pg_database(url)  # noqa: E731
    else:
        url = args.db or f"sqlite:///{tmp / 'bench.db'}"
    queue_name = "bench-doorbell"
    settings: dict[str, Any] = {
        "functions": {"doorbell_queue": queue_name},
        "storage": {"polling_interval": 0.05, "idle_polling_interval": 0.1},
    }
    consumer = ChokaQ(storage_url=url, **settings)
    consumer.storage.upgrade()
    started: dict[int, float] = {}
    ran = threading.Event()

    @consumer.job("bench_v1", queue="work")
    def handler(payload: dict[str, Any]) -> None:
        started[payload["n"]] = time.time()
        ran.set()

    env = {
        "ChokaqDoorbell": azurite.connection_string,
        "CHOKAQ_DRAIN_IDLE_SECONDS": "0.2",
        "CHOKAQ_DRAIN_SECONDS": "30",
    }
    fa = build_function_app(consumer, environ=env)
    wake = {f.get_function_name(): f.get_user_function() for f in fa.get_functions()}["wake"]
    producer = ChokaQ(storage_url=url, **settings)
    bell = install(producer, env)
    assert bell is not None
    host = QueueClient.from_connection_string(
        azurite.connection_string, queue_name, message_decode_policy=TextBase64DecodePolicy()
    )
    host.create_queue()

    def poll_and_wake(stop: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        while not stop.is_set():
            got = False
            for m in host.receive_messages(max_messages=1, visibility_timeout=30):
                got = True
                host.delete_message(m)
                md = {"Id": meta.Datum(m.id, "string"), "DequeueCount": meta.Datum(m.dequeue_count, "int")}
                msg = QueueMessageInConverter.decode(meta.Datum(m.content, "string"), trigger_metadata=md)
                loop.run_until_complete(wake(msg))
            if not got:
                time.sleep(args.poll)
        loop.close()

    stop = threading.Event()
    poller = threading.Thread(target=poll_and_wake, args=(stop,), daemon=True)
    poller.start()
    lat: list[float] = []
    try:
        for n in range(args.samples):
            ran.clear()
            t0 = time.time()
            producer.enqueue("bench_v1", {"n": n})
            if not ran.wait(30):
                raise SystemExit(f"job {n} did not start within 30 s")
            lat.append((started[n] - t0) * 1000)
            time.sleep(bell.interval + 0.3)  # past the coalescing interval and the slice's idle end
    finally:
        stop.set()
        poller.join(10)
        bell.close()
        fa.startup_task_done = False  # type: ignore[attr-defined]
        producer.close()
        consumer.close()
        azurite.stop()
        if drop is not None:
            drop()
    lat.sort()
    p99 = lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))]
    print(
        json.dumps(
            {
                "db": url.split(":", 1)[0],
                "samples": len(lat),
                "p50_ms": round(statistics.median(lat), 1),
                "p99_ms": round(p99, 1),
                "max_ms": round(lat[-1], 1),
                "rings": bell.sent,
            }
        )
    )


if __name__ == "__main__":
    main()
