"""Oversized anonymous bodies against a real ``chokaq serve``: server RSS growth, and how fast
/api/health answers meanwhile. The test (tests/api/test_body_limit.py) asserts the 413s and the
RSS bound; the health timing lives here because timed assertions are flaky on shared machines.

    .venv/bin/python benchmarks/hostile_bodies.py [--bodies 20] [--mb 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.api.live_server import LiveServer, raw_request, rss_kib


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bodies", type=int, default=20)
    ap.add_argument("--mb", type=int, default=50)
    args = ap.parse_args()
    size = args.mb * 1024 * 1024
    with tempfile.TemporaryDirectory() as tmp:
        server = LiveServer(Path(tmp) / "bench.db")
        try:
            before = rss_kib(server.pid)
            head = (
                f"POST /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {size}\r\n\r\n"
            )
            statuses: list[int] = []
            peak = before
            done = threading.Event()

            def attack() -> None:
                statuses.append(raw_request(server.port, head, body_size=size))

            threads = [threading.Thread(target=attack) for _ in range(args.bodies)]
            health_ms: list[float] = []

            def watch() -> None:
                nonlocal peak
                while not done.is_set() or len(health_ms) < 20:
                    t0 = time.perf_counter()
                    with urllib.request.urlopen(server.url + "/api/health", timeout=10) as r:
                        r.read()
                    health_ms.append((time.perf_counter() - t0) * 1000)
                    peak = max(peak, rss_kib(server.pid))
                    time.sleep(0.01)

            watcher = threading.Thread(target=watch)
            watcher.start()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            done.set()
            watcher.join()
            after = rss_kib(server.pid)
        finally:
            server.stop()
    print(f"bodies: {args.bodies} x {args.mb} MB anonymous; statuses: {sorted(set(statuses))}")
    print(
        f"server RSS: before {before / 1024:.1f} MB, peak {peak / 1024:.1f} MB, after {after / 1024:.1f} MB "
        f"(growth {(after - before) / 1024:.1f} MB)"
    )
    if health_ms:
        print(
            f"/api/health meanwhile: n={len(health_ms)} median {statistics.median(health_ms):.1f} ms, "
            f"max {max(health_ms):.1f} ms"
        )


if __name__ == "__main__":
    main()
