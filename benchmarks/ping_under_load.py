"""Issue 37's measure, in its own words: an async FastAPI app served by uvicorn (a subprocess) with an
``/enqueue`` route (``await handle.enqueue_async(...)``) and a ``/ping`` route. A load generator
(another process, keep-alive HTTP/1.1 on asyncio streams) posts to /enqueue at a fixed
concurrency while this process times /ping, one request every 10 ms: ping p50/p99 idle (no load)
and busy, and the app's enqueue rate and server CPU per job (the uvicorn process's own CPU time,
from /proc).

    .venv/bin/python benchmarks/ping_under_load.py [--seconds 15] [--concurrency 32]
        [--route async|sync] [--root DIR] [--json]

The server inherits the environment: ``CHOKAQ_STORAGE__PRODUCER_ON_LOOP=true`` stores the jobs on
its event loop (psycopg's AsyncConnection) instead of on the app's producer threads.
``--route sync``: the same route calling the synchronous ``app.enqueue`` (which blocks the event
loop for each round trip): what a blocked loop looks like in this measure. ``--root``: the
checkout to import chokaq from in the server (an older commit, for a paired comparison). PostgreSQL
only (database ``bench_ping``, recreated per run). Not run by CI; the machine's load average is
printed with the figures, which mean little on a busy machine (benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

DB = "bench_ping"
HERE = Path(__file__).resolve()


# --------------------------------------------------------------------------- the server (subprocess)
class Email(BaseModel):  # at module level: FastAPI resolves the routes' annotations here
    to: str


def serve(args: Any) -> None:
    sys.path.insert(0, args.root)
    from contextlib import asynccontextmanager

    import uvicorn
    from fastapi import FastAPI

    from chokaq import ChokaQ

    jobs = ChokaQ(storage_url=args.url)

    @jobs.job("email_v1", payload=Email)
    async def send_email(email: Email) -> None: ...

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> Any:
        send_email.enqueue(Email(to="warm@example.com"))  # the engine connects, the queue row exists
        yield
        jobs.close()

    web = FastAPI(lifespan=lifespan)

    @web.get("/ping")
    async def ping() -> dict[str, bool]:
        return {"ok": True}

    if args.route == "async":

        @web.post("/enqueue")
        async def enqueue(email: Email) -> dict[str, str]:
            return {"id": await send_email.enqueue_async(email)}
    else:

        @web.post("/enqueue")
        async def enqueue_blocking(email: Email) -> dict[str, str]:
            return {"id": send_email.enqueue(email)}  # blocks the loop: the control

    uvicorn.run(web, host="127.0.0.1", port=args.port, log_level="warning", access_log=False, loop=args.loop)


# --------------------------------------------------------------------------- the load (subprocess)
async def _post(reader: Any, writer: Any, port: int, body: bytes) -> int:
    """One keep-alive HTTP/1.1 POST /enqueue; its status. Written by hand, not with httpx: on two
    shared cores the generator's own CPU per request (httpx's was several times this) capped the
    load it could put on the server."""
    writer.write(
        b"POST /enqueue HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (port, len(body), body)
    )
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)
    return status


def load(args: Any) -> None:
    import asyncio

    async def run() -> dict[str, Any]:
        done = errors = 0
        end = time.perf_counter() + args.seconds

        async def worker(w: int) -> None:
            nonlocal done, errors
            n = 0
            reader, writer = await asyncio.open_connection("127.0.0.1", args.port)
            try:
                while time.perf_counter() < end:
                    body = json.dumps({"to": f"{w}-{n}@example.com"}).encode()
                    n += 1
                    try:
                        ok = await _post(reader, writer, args.port, body) == 200
                    except (OSError, asyncio.IncompleteReadError):
                        errors += 1
                        writer.close()
                        reader, writer = await asyncio.open_connection("127.0.0.1", args.port)
                        continue
                    done += ok
                    errors += not ok
            finally:
                writer.close()

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(args.concurrency)))
        return {"enqueued": done, "errors": errors, "seconds": time.perf_counter() - t0}

    print(json.dumps(asyncio.run(run())))


# --------------------------------------------------------------------------- the driver
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pings(port: int, seconds: float) -> list[float]:
    """/ping every 10 ms for ``seconds``: each one's latency in ms."""
    import httpx

    out: list[float] = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        client.get("/ping")
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t = time.perf_counter()
            client.get("/ping").raise_for_status()
            out.append((time.perf_counter() - t) * 1e3)
            time.sleep(max(0.0, 0.01 - (time.perf_counter() - t)))
    return out


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1]


def wait_up(port: int, server: subprocess.Popen[bytes]) -> None:
    import httpx

    for _ in range(300):
        if server.poll() is not None:
            raise SystemExit("the server exited")
        try:
            httpx.get(f"http://127.0.0.1:{port}/ping", timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit("the server did not answer")


def measure(args: Any) -> dict[str, Any]:
    sys.path.insert(0, str(HERE.parents[1]))
    from benchmarks.peers.common import drop_database, dsn_url, recreate_database

    recreate_database(DB)
    url = dsn_url(DB).replace("postgresql://", "postgresql+psycopg://", 1)
    sys.path.insert(0, args.root)
    from chokaq.storage import Storage

    storage = Storage(url)
    storage.upgrade()
    storage.close()
    port = free_port()
    me = [sys.executable, str(HERE), "--port", str(port), "--root", args.root]
    server = subprocess.Popen([*me, "--serve", "--url", url, "--route", args.route, "--loop", args.loop])
    try:
        wait_up(port, server)
        idle = pings(port, args.seconds)
        cpu0 = process_cpu(server.pid)
        gen = subprocess.Popen(
            [*me, "--load", "--concurrency", str(args.concurrency), "--seconds", str(args.seconds)],
            stdout=subprocess.PIPE,
        )
        time.sleep(1.0)  # the load is running
        busy = pings(port, args.seconds - 2.0)
        out, _ = gen.communicate(timeout=args.seconds + 120)
        cpu = process_cpu(server.pid) - cpu0
        loaded = json.loads(out)
    finally:
        server.terminate()
        server.wait(30)
        drop_database(DB)
    return {
        "route": args.route,
        "concurrency": args.concurrency,
        "ping_idle_p50_ms": pct(idle, 50),
        "ping_idle_p99_ms": pct(idle, 99),
        "ping_busy_p50_ms": pct(busy, 50),
        "ping_busy_p99_ms": pct(busy, 99),
        "p99_ratio": pct(busy, 99) / pct(idle, 99),
        "pings": [len(idle), len(busy)],
        "enqueued_per_s": loaded["enqueued"] / loaded["seconds"],
        "errors": loaded["errors"],
        "server_cpu_us_per_job": cpu / max(1, loaded["enqueued"]) * 1e6,
        "loadavg": os.getloadavg(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--route", choices=["async", "sync"], default="async")
    ap.add_argument("--loop", default="asyncio", help="uvicorn's --loop (asyncio, uvloop)")
    ap.add_argument("--root", default=str(HERE.parents[1]))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        return serve(args)
    if args.load:
        return load(args)
    result = measure(args)
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"route={result['route']} x{result['concurrency']}: ping p50/p99 idle "
        f"{result['ping_idle_p50_ms']:.2f}/{result['ping_idle_p99_ms']:.2f} ms, busy "
        f"{result['ping_busy_p50_ms']:.2f}/{result['ping_busy_p99_ms']:.2f} ms (p99 {result['p99_ratio']:.2f}x); "
        f"{result['enqueued_per_s']:.0f} enqueues/s, server CPU {result['server_cpu_us_per_job']:.0f} us/job, "
        f"errors {result['errors']}; load average {' '.join(f'{x:.2f}' for x in result['loadavg'])}"
    )


if __name__ == "__main__":
    main()
