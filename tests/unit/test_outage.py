"""The outage clock, its backoff and the health file `chokaq health` reads."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from chokaq.domain.backoff import backoff
from chokaq.runtime.outage import HEALTH_STALE_SECONDS, Outage, read_health


def test_backoff_grows_and_is_capped() -> None:
    assert backoff(0, base=1.0, cap=10.0) <= 1.0
    assert 2.0 <= backoff(2, base=1.0, cap=10.0) <= 4.0
    assert all(5.0 <= backoff(n, base=1.0, cap=10.0) <= 10.0 for n in (4, 10, 1000))


def test_one_log_line_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    outage = Outage(60)
    with caplog.at_level(logging.WARNING, "chokaq.outage"):
        for _ in range(50):  # fifty paths failing at once
            outage.failed("claim", OSError("refused"), retry_in=5.0)
    assert len(caplog.records) == 1 and "riding it out" in caplog.records[0].getMessage()
    assert outage.status() == "degraded" and not outage.over_budget()


def test_health_file_follows_the_budget(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    outage = Outage(1, str(path), "w1")
    outage.write_health()
    assert read_health(str(path)) == (True, "worker w1: ok")
    outage.failed("heartbeat", OSError("refused"))
    outage.down_since = time.monotonic() - 2  # two seconds into the outage, past the 1 s budget
    outage.failed("heartbeat", OSError("refused"))
    healthy, reason = read_health(str(path))
    assert not healthy and "OutageTolerance" in reason
    outage.succeeded()
    assert read_health(str(path))[0]
    body = json.loads(path.read_text())
    body["updated_unix"] = time.time() - HEALTH_STALE_SECONDS - 1
    path.write_text(json.dumps(body))
    healthy, reason = read_health(str(path))
    assert not healthy and "stuck or gone" in reason
    outage.clear_health()
    assert read_health(str(path)) == (True, "no worker health file")
    path.write_text("{not json")
    assert not read_health(str(path))[0]
