from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Fast heartbeats so crashes turn into zombies within a second or two.
FAST_ENV = {
    "CHOKAQ_EXECUTION__HEARTBEAT_INTERVAL_MIN": "0.1",
    "CHOKAQ_EXECUTION__HEARTBEAT_INTERVAL_MAX": "0.15",
    "CHOKAQ_RECOVERY__PROCESSING_ZOMBIE_TIMEOUT": "1",
    "CHOKAQ_RECOVERY__FETCHED_JOB_TIMEOUT": "1",
    "CHOKAQ_STORAGE__POLLING_INTERVAL": "0.05",
}


def chokaq_env(db_url: str, record: Path | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHOKAQ_", "OTEL_"))}
    env.update(FAST_ENV)
    env["CHOKAQ_STORAGE_URL"] = db_url
    env["PYTHONPATH"] = str(ROOT)
    if record is not None:
        env["CHOKAQ_TEST_RECORD"] = str(record)
    env.update(extra)
    return env


def chokaq_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "chokaq.cli.main", *args]


def run_cli(db_url: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        chokaq_cmd(*args), env=chokaq_env(db_url, **extra), cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def workers() -> Iterator[Any]:
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(db_url: str, record: Path, *args: str, **extra: str) -> subprocess.Popen[bytes]:
        log = open(record.with_suffix(f".worker{len(procs)}.log"), "wb")  # noqa: SIM115 - closed with the process
        p = subprocess.Popen(
            chokaq_cmd("--app", "tests.apps.crashapp:app", "worker", *args),
            env=chokaq_env(db_url, record, **extra),
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        procs.append(p)
        return p

    yield spawn
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait(10)
