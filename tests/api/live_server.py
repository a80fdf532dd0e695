"""``chokaq serve`` as a real subprocess on a free loopback port, for tests that need a real
server: memory of the process, raw sockets, bodies the test client cannot send."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.api.helpers import TOKENS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_kib(pid: int) -> int:
    """Resident set size of a process, from /proc/<pid>/status (VmRSS, in KiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


class LiveServer:
    def __init__(self, db_path: Path, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "CHOKAQ_STORAGE_URL": f"sqlite:///{db_path}",
            "CHOKAQ_ADMIN__TOKENS": json.dumps(TOKENS),
            **env,
        }
        self.env.pop("CHOKAQ_APP", None)
        cli = [sys.executable, "-c", "from chokaq.cli.main import main; main()"]
        subprocess.run([*cli, "db", "upgrade"], env=self.env, check=True, capture_output=True)
        self.proc = subprocess.Popen(
            [*cli, "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(self.url + "/api/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"chokaq serve did not start: {err[-2000:]}")
            time.sleep(0.1)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def raw_request(port: int, head: str, body_size: int = 0, chunk: int = 256 * 1024, timeout: float = 30.0) -> int:
    """Send ``head`` then up to ``body_size`` zero bytes, stopping as soon as the server answers;
    return the response status. The server is meant to answer before the body is through."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head.encode("latin-1"))
        sent = 0
        block = b"0" * chunk
        s.setblocking(False)
        import select

        while sent < body_size:
            readable, writable, _ = select.select([s], [s], [], timeout)
            if readable:
                break
            if not writable:
                raise AssertionError("the server neither read the body nor answered")
            try:
                sent += s.send(block[: min(chunk, body_size - sent)])
            except (BlockingIOError, InterruptedError):
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
        s.setblocking(True)
        s.settimeout(timeout)
        data = b""
        while b"\r\n" not in data:
            part = s.recv(4096)
            if not part:
                break
            data += part
    status_line = data.split(b"\r\n", 1)[0].decode("latin-1")
    if not status_line.startswith("HTTP/1.1 "):
        raise AssertionError(f"no HTTP response (got {data[:200]!r})")
    return int(status_line.split()[1])


class ThreadServer:
    """uvicorn serving an ASGI app in a thread of this process (the test can reach into the app)."""

    def __init__(self, api: Any) -> None:
        import threading

        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(api, host="127.0.0.1", port=self.port, log_level="warning", timeout_graceful_shutdown=2)
        )
        self.thread = threading.Thread(target=self.server.run, name=f"api-{self.port}", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test API server did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
