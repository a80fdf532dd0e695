"""Execution.EventLoop: a worker that runs its own loop (Worker.run, `chokaq worker`) runs on the
loop the setting names; uvloop is optional and asked for by name."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from typing import Any

import pytest

from chokaq import ChokaQ
from chokaq.domain.errors import ConfigurationError
from chokaq.domain.models import EnqueueRequest
from tests.helpers import wait_for


@pytest.mark.parametrize("name", ["asyncio", "uvloop"])
def test_a_worker_runs_its_jobs_on_the_loop_the_setting_names(db_url: str, name: str) -> None:
    app = ChokaQ(storage_url=db_url, execution={"event_loop": name}, storage={"polling_interval": 0.05})
    app.storage.upgrade()
    loops: list[str] = []

    @app.job("probe")
    async def probe(payload: Any) -> None:
        await asyncio.sleep(0)  # a real suspension: the loop must resume the handler too
        loops.append(type(asyncio.get_running_loop()).__module__.split(".")[0])

    app.storage.enqueue_many([EnqueueRequest(type="probe") for _ in range(30)])
    worker = app.worker(concurrency=5)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: worker.stats["succeeded"] == 30, timeout=30)
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()
    assert set(loops) == {name}, loops
    app.close()


def test_uvloop_not_installed_is_a_clear_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # uvloop is installed here; its absence (the optional extra left out) is what this simulates.
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "uvloop" else real(n, *a))
    with pytest.raises(ConfigurationError) as refused:
        ChokaQ(storage_url="sqlite://", execution={"event_loop": "uvloop"})
    assert "uvloop is not installed" in str(refused.value)
    assert "chokaq[uvloop]" in str(refused.value)
