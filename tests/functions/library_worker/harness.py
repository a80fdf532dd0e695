"""The host side: a Python 3.13 environment with the worker library, and a client for proxy.py.

The environment is the interpreter running the tests when it already has ``azure-functions-runtime``
(``pip install -e '.[test]'`` on Python 3.13 installs it), else a venv made once from the app's
``requirements.txt`` (the Functions remote build's lock) plus requirements-worker.txt, under
``.venv-func-worker`` (git-ignored), rebuilt when either file changes.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
VENV = ROOT / ".venv-func-worker"
WORKER_REQUIREMENTS = HERE / "requirements-worker.txt"


def _python313() -> str | None:
    """CHOKAQ_WORKER_PYTHON, else the first python3.13 that runs (a pyenv shim runs only when its
    version is selected, so pyenv's own 3.13 is tried too)."""
    explicit = os.environ.get("CHOKAQ_WORKER_PYTHON")
    if explicit:
        return explicit
    candidates = [
        shutil.which("python3.13"),
        *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.13.*/bin/python3.13"))),
    ]
    for candidate in candidates:
        if candidate and subprocess.run([candidate, "-c", ""], capture_output=True, check=False).returncode == 0:
            return candidate
    return None


def _unavailable(reason: str) -> None:
    if os.environ.get("CHOKAQ_REQUIRE_FUNCTIONS_WORKER"):
        pytest.fail(reason + " and CHOKAQ_REQUIRE_FUNCTIONS_WORKER is set")
    pytest.skip(reason)


def worker_python() -> str:
    """A Python >= 3.13 with the worker library, the app's lock and protoc."""
    if sys.version_info >= (3, 13):
        try:
            import azure_functions_runtime  # type: ignore[import-not-found]  # noqa: F401
            import grpc_tools  # type: ignore[import-not-found]  # noqa: F401

            return sys.executable
        except ImportError:
            pass
    digest = hashlib.sha256((ROOT / "requirements.txt").read_bytes() + WORKER_REQUIREMENTS.read_bytes()).hexdigest()
    python = VENV / "bin" / "python"
    stamp = VENV / ".installed"
    if stamp.exists() and stamp.read_text() == digest and python.exists():
        return str(python)
    base = _python313()
    if base is None:
        _unavailable("no Python 3.13 for the Functions worker library (set CHOKAQ_WORKER_PYTHON)")
    assert base is not None
    shutil.rmtree(VENV, ignore_errors=True)
    steps = [
        [base, "-m", "venv", str(VENV)],
        [str(python), "-m", "pip", "install", "-q", "-r", str(ROOT / "requirements.txt")],
        [str(python), "-m", "pip", "install", "-q", "-r", str(WORKER_REQUIREMENTS)],
    ]
    for cmd in steps:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            _unavailable(f"{' '.join(cmd[:4])}... failed: {done.stderr.strip()[-2000:]}")
    stamp.write_text(digest)
    return str(python)


def compile_messages(python: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [python, "-m", "grpc_tools.protoc", f"-I{HERE}", f"--python_out={out}", str(HERE / "messages.proto")],
        check=True,
    )


class Worker:
    """proxy.py in its own process: requests in, (response, log records) out."""

    def __init__(self, python: str, messages: Path, env: Mapping[str, str], stderr_path: Path) -> None:
        self.env = dict(env)
        self.stderr_path = stderr_path
        self._stderr = stderr_path.open("wb")
        self.process = subprocess.Popen(
            [python, str(HERE / "proxy.py"), str(messages)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=ROOT,
            env=dict(env),
            text=True,
        )
        self.logs: list[dict[str, Any]] = []
        self._responses: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            doc = json.loads(line)
            with self._cond:
                if "log" in doc:
                    self.logs.append(doc["log"])
                else:
                    self._responses.append(doc)
                self._cond.notify_all()
        with self._cond:
            self._responses.append({"crash": f"worker exited ({self.process.wait()})"})
            self._cond.notify_all()

    def call(self, timeout: float = 120, **request: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        with self._cond:
            self._responses.clear()
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        with self._cond:
            assert self._cond.wait_for(lambda: self._responses, timeout), f"no answer to {request['op']}"
            doc = self._responses.pop(0)
        assert "crash" not in doc, doc["crash"] + "\n" + self.stderr()
        response: dict[str, Any] = doc["response"]
        return response

    def log_mark(self) -> int:
        with self._cond:
            return len(self.logs)

    def logs_since(self, mark: int) -> list[dict[str, Any]]:
        with self._cond:
            return list(self.logs[mark:])

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self._reader.join(10)
        self._stderr.close()
