"""A real Azure Storage queue service for the doorbell tests: Azurite, started on loopback.

`.ci/run` installs it (npm, into .ci/node) and sets CHOKAQ_REQUIRE_AZURITE=1, so in CI a missing
Azurite fails the tests instead of skipping them. Locally: `npm install --prefix .ci/node
azurite@3.35.0`, or put `azurite-queue` on PATH, or point CHOKAQ_AZURITE at the executable.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCAL_AZURITE = ROOT / ".ci" / "node" / "node_modules" / ".bin" / "azurite-queue"


def azurite_executable() -> str | None:
    explicit = os.environ.get("CHOKAQ_AZURITE")
    if explicit:
        return explicit
    if LOCAL_AZURITE.exists():
        return str(LOCAL_AZURITE)
    return shutil.which("azurite-queue")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Azurite:
    process: subprocess.Popen[bytes]
    port: int

    @property
    def connection_string(self) -> str:
        # Azurite's well-known development account; the key ships with the SDK (public, not a secret).
        from azure.storage.queue._shared.parser import DEVSTORE_ACCOUNT_KEY, DEVSTORE_ACCOUNT_NAME

        return (
            f"DefaultEndpointsProtocol=http;AccountName={DEVSTORE_ACCOUNT_NAME};"
            f"AccountKey={DEVSTORE_ACCOUNT_KEY};"
            f"QueueEndpoint=http://127.0.0.1:{self.port}/{DEVSTORE_ACCOUNT_NAME};"
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def start_azurite(workdir: Path) -> Azurite:
    exe = azurite_executable()
    if exe is None:
        reason = (
            "Azurite is not installed (npm install --prefix .ci/node azurite@3.35.0, or set "
            "CHOKAQ_AZURITE); .ci/run installs it"
        )
        if os.environ.get("CHOKAQ_REQUIRE_AZURITE"):
            pytest.fail(reason + " and CHOKAQ_REQUIRE_AZURITE is set")
        pytest.skip(reason)
    workdir.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    log = (workdir / "azurite.log").open("wb")
    proc = subprocess.Popen(
        [
            exe,
            "--queueHost",
            "127.0.0.1",
            "--queuePort",
            str(port),
            "--inMemoryPersistence",
            "--disableTelemetry",
            "--skipApiVersionCheck",
            "--silent",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=workdir,
    )
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"azurite exited with {proc.returncode}: {(workdir / 'azurite.log').read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("azurite did not listen within 60 s") from None
            time.sleep(0.05)
    return Azurite(proc, port)


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """One Azurite for the session (tests use their own queue names)."""
    server = start_azurite(tmp_path_factory.mktemp("azurite"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_azurite(tmp_path: Path) -> Iterator[Azurite]:
    """An Azurite this test may stop."""
    server = start_azurite(tmp_path / "azurite")
    try:
        yield server
    finally:
        server.stop()
