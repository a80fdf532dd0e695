"""The Functions app under Microsoft's Python language worker library, as the Functions host runs it.

``azure-functions-runtime`` (the worker library the host loads for Python 3.13) indexes
function_app.py, loads the functions and runs invocations, driven as the host's proxy drives it
(library_worker/proxy.py), with the example settings (local.settings.example.json) and logging set
up as on Azure: the root logger at INFO, every record forwarded to the host. Against a SQLite file
and Azurite for the doorbell queue.

What it shows (issue 33): a start logs no warning or error, and a doorbell ring (the producer's send
after an enqueue, and the ``wake`` invocation it triggers) logs at most one line of the app's.
"""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.storage.queue import QueueClient, TextBase64DecodePolicy

from chokaq import ChokaQ

from .conftest import Azurite
from .library_worker.harness import ROOT, Worker, compile_messages, worker_python

TOKEN = "chokaq-local-dev-token"  # the example settings hold its sha256 (docs/functions.md)
FUNCTIONS = {"http_app_func", "sweep", "retention", "drain", "wake"}
# The library's own line per invocation ("Function name: wake, Function Type: sync"), the host's
# equivalent of "Executing 'Functions.wake'": not the app's.
LIBRARY_LOGGER = "azure.functions"

APP_MODULE = """
from chokaq import ChokaQ

app = ChokaQ()


@app.job("email_v1", queue="default")
def email(payload):
    return None
"""


def example_settings() -> dict[str, str]:
    values: dict[str, str] = json.loads((ROOT / "local.settings.example.json").read_text())["Values"]
    return values


def start_worker(tmp_path: Path, overrides: dict[str, str]) -> Worker:
    python = worker_python()
    compile_messages(python, tmp_path / "messages")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", ""), **example_settings(), **overrides}
    return Worker(python, tmp_path / "messages", env, tmp_path / "worker.stderr")


@pytest.fixture
def worker(tmp_path: Path, azurite: Azurite) -> Iterator[tuple[Worker, QueueClient]]:
    (tmp_path / "userapp").mkdir()
    (tmp_path / "userapp" / "ring_app.py").write_text(APP_MODULE)
    db_url = f"sqlite:///{tmp_path / 'chokaq.db'}"
    schema = ChokaQ(storage_url=db_url)
    schema.storage.upgrade()
    schema.close()
    queue_name = f"bell-{uuid.uuid4().hex[:12]}"
    # What differs from the example here: a database that exists, the app with handlers (so drain
    # and wake are registered), Azurite on its test port, a queue of this test's own.
    w = start_worker(
        tmp_path,
        {
            "CHOKAQ_STORAGE_URL": db_url,
            "CHOKAQ_APP": "ring_app:app",
            "ChokaqDoorbell": azurite.connection_string,
            "CHOKAQ_FUNCTIONS__DOORBELL_QUEUE": queue_name,
            "PYTHONPATH": str(tmp_path / "userapp"),
            # A slice ends after this many idle seconds (20 in the example): 1 keeps each ring short.
            "CHOKAQ_DRAIN_IDLE_SECONDS": "1",
        },
    )
    host_side = QueueClient.from_connection_string(
        azurite.connection_string, queue_name, message_decode_policy=TextBase64DecodePolicy()
    )
    host_side.create_queue()  # as the Bicep makes it; the host's queue listener needs it before a ring
    try:
        yield w, host_side
    finally:
        w.stop()


def ok(response: dict[str, Any]) -> None:
    result = response.get("result", {})
    assert result.get("status") == "Success", json.dumps(result, indent=1)


def http(w: Worker, method: str, path: str, body: str = "", token: bool = False) -> tuple[int, Any]:
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {TOKEN}"
    r = w.call(
        op="invoke",
        function="http_app_func",
        kind="http",
        method=method,
        url=f"http://localhost:7071{path}",
        headers=headers,
        body=body,
    )
    ok(r)
    out = r["return_value"]["http"]
    raw = out.get("body", {})
    text = base64.b64decode(raw["bytes"]).decode() if "bytes" in raw else raw.get("string", "")
    return int(out["status_code"]), json.loads(text) if text else None


def app_lines(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in logs if r["category"] != LIBRARY_LOGGER]


def receive(host_side: QueueClient, timeout: float = 30) -> str:
    """The next doorbell message, as the host's queue listener would take it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in host_side.receive_messages(max_messages=1, visibility_timeout=60):
            host_side.delete_message(m)
            return str(m.content)
        time.sleep(0.2)
    raise AssertionError("no doorbell message within 30 s")


def noisy(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["level"] in ("WARNING", "ERROR", "CRITICAL")]


def stderr_problems(text: str) -> list[str]:
    return [line for line in text.splitlines() if any(w in line.lower() for w in ("error", "warning", "traceback"))]


# The first run makes the 3.13 venv (pip, about a minute and a half here) inside the fixture.
@pytest.mark.timeout(900)
def start(w: Worker, functions: set[str]) -> list[dict[str, Any]]:
    """Init, index and load, as the host does at start; the log records of the start."""
    ok(w.call(op="init", directory=str(ROOT)))
    meta = w.call(op="metadata", directory=str(ROOT))
    ok(meta)
    assert {m["name"] for m in meta["function_metadata_results"]} == functions
    for name in sorted(functions):
        ok(w.call(op="load", function=name))
    return w.logs_since(0)


@pytest.mark.timeout(900)
def test_the_example_settings_as_they_are_start_without_a_warning(tmp_path: Path) -> None:
    """local.settings.example.json unchanged: the bare app (CHOKAQ_APP empty) with the drain schedule
    and the doorbell queue set, waiting for handlers. Nothing connects at start, so the example's SQL
    Server and Azurite need not exist."""
    w = start_worker(tmp_path, {})
    try:
        logged = start(w, {"http_app_func", "sweep", "retention"})
        assert noisy(logged) == [], logged
        assert [r["message"] for r in app_lines(logged)] == [
            "doorbell on: enqueues ring Azure Storage queue 'chokaq-doorbell' (at most once per 1s per chokaq queue)"
        ]
        assert stderr_problems(w.stderr()) == [], w.stderr()
    finally:
        w.stop()


def test_the_app_starts_quietly_and_a_ring_logs_at_most_one_line(worker: tuple[Worker, QueueClient]) -> None:
    w, host_side = worker
    started = start(w, FUNCTIONS)
    assert noisy(started) == [], started
    assert stderr_problems(w.stderr()) == [], w.stderr()
    assert [r["message"] for r in app_lines(started)] == [
        f"doorbell on: enqueues ring Azure Storage queue {w.env['CHOKAQ_FUNCTIONS__DOORBELL_QUEUE']!r} "
        "(at most once per 1s per chokaq queue)"
    ]

    assert http(w, "GET", "/api/health") == (200, {"status": "ok", "db": "ok"})
    status, stats = http(w, "GET", "/api/stats", token=True)
    assert status == 200, stats

    for n in range(2):
        mark = w.log_mark()
        status, job = http(w, "POST", "/api/jobs", json.dumps({"type": "email_v1", "payload": {"n": n}}), token=True)
        assert status == 201, job
        ring = receive(host_side)  # the producer's ring, sent after the enqueue committed
        assert json.loads(ring)["queue"] == "default"
        ok(w.call(op="invoke", function="wake", kind="queue", body=ring))
        assert http(w, "GET", f"/api/jobs/{job['id']}", token=True)[1]["location"] == "archive"  # succeeded
        logged = app_lines(w.logs_since(mark))
        assert noisy(logged) == [], logged
        assert len(logged) == 1, json.dumps(logged, indent=1)
        assert logged[0]["message"].startswith("wake (queue 'default', "), logged
        assert "drain finished: {" in logged[0]["message"] and "'succeeded': 1" in logged[0]["message"], logged

    for timer in ("sweep", "drain"):
        mark = w.log_mark()
        ok(w.call(op="invoke", function=timer, kind="timer"))
        logged = app_lines(w.logs_since(mark))
        assert noisy(logged) == [] and len(logged) <= 1, json.dumps(logged, indent=1)
    assert stderr_problems(w.stderr()) == [], w.stderr()
