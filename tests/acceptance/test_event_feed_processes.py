"""The Deck hears every process (issue 36): ``chokaq serve`` in one process, a worker SIGKILLed
mid-job in a second, ``chokaq sweep`` in a third. The served API's live stream carries the rescue
within two poll intervals, ``/api/events/recent`` and a reconnect with ``Last-Event-ID`` replay it
from the event feed, and the audit log shows the system's rescue."""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chokaq.domain.models import EnqueueRequest
from tests.acceptance.conftest import ROOT, chokaq_cmd, chokaq_env
from tests.acceptance.test_crash import open_storage, starts, sweep
from tests.api.helpers import TOKENS
from tests.api.live_server import free_port
from tests.helpers import wait_for

POLL = 1.0  # Admin.EventPollInterval of the served API
VIEWER = {"Authorization": f"Bearer {next(t for t, v in TOKENS.items() if v['role'] == 'viewer')}"}


@pytest.fixture
def served(db_url: str, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = chokaq_env(db_url, CHOKAQ_ADMIN__TOKENS=json.dumps(TOKENS), CHOKAQ_ADMIN__EVENT_POLL_INTERVAL=str(POLL))
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        chokaq_cmd("serve", "--port", str(port)), env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(url + "/api/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    try:
        wait_for(up, timeout=30, interval=0.1)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        log.close()


def get(url: str, path: str) -> Any:
    req = urllib.request.Request(url + path, headers=VIEWER)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


class Stream:
    """An SSE stream of the served API read line by line."""

    def __init__(self, url: str, last_event_id: str | None = None) -> None:
        port = int(url.rsplit(":", 1)[1])
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=POLL * 3)
        headers = dict(VIEWER)
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        self.conn.request("GET", "/api/events", headers=headers)
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200

    def events(self, until: float) -> Iterator[tuple[str | None, dict[str, Any]]]:
        event_id = None
        while time.monotonic() < until:
            line = self.resp.fp.readline().decode().rstrip("\n")
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                yield event_id, json.loads(line[6:])
                event_id = None

    def close(self) -> None:
        self.conn.close()


def test_the_served_api_hears_a_rescue_by_a_sweep_in_another_process(
    db_url: str, tmp_path: Path, workers: Any, served: str
) -> None:
    s = open_storage(db_url)
    job_id, _ = s.enqueue(EnqueueRequest(type="slow", payload='{"seconds": 60}'))
    record = tmp_path / "record.txt"
    proc = workers(db_url, record)
    wait_for(lambda: starts(record)[job_id] == 1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)

    stream = Stream(served)
    try:
        # The stream's first stats tick: its poll (and the feed's follower) is running.
        assert any(e["kind"] == "stats.updated" for _, e in stream.events(time.monotonic() + POLL * 3))
        results: list[dict[str, int]] = []
        wait_for(lambda: results.append(sweep(db_url)) or results[-1]["archived"] == 1, timeout=30, interval=0.2)
        swept = time.monotonic()
        rescue = next(((i, e) for i, e in stream.events(swept + 2 * POLL) if e["kind"] == "zombie.rescue"), None)
    finally:
        stream.close()
    assert rescue is not None, "the stream did not carry the rescue within two poll intervals"
    rescue_id, event = rescue
    assert (event["archived"], event["ids"], event["feed_id"]) == (1, [job_id], int(rescue_id or 0))

    recent = get(served, "/api/events/recent")
    (polled,) = [e for e in recent["events"] if e["kind"] == "zombie.rescue"]
    assert polled["ids"] == [job_id] and recent["cursor"] >= polled["feed_id"]
    audit = get(served, "/api/audit")
    (rescued,) = [a for a in audit["items"] if a["action"] == "sweep.rescue"]
    assert rescued["actor"] == "system:sweep" and rescued["job_ids"] == [job_id]

    # A Deck that reconnects after missing it replays it from the feed, not from memory.
    again = Stream(served, last_event_id=str(polled["feed_id"] - 1))
    try:
        replayed = [e for _, e in again.events(time.monotonic() + POLL) if e["kind"] == "zombie.rescue"]
    finally:
        again.close()
    assert [e["ids"] for e in replayed] == [[job_id]]
