"""Functions-hosted execution: a timer-triggered, time-boxed worker ("drain").

Each tick runs an ordinary :class:`chokaq.runtime.worker.Worker` inside the function invocation for
at most ``CHOKAQ_DRAIN_SECONDS`` (default 240), or until it has been idle for
``CHOKAQ_DRAIN_IDLE_SECONDS`` (default 20), then stops it gracefully: no more fetches, buffered jobs
released to Pending, running handlers given ``Execution.ShutdownGrace``, unfinished ones rescheduled.
It claims through the same fenced storage calls and runs the same heartbeat task as any worker, so
if the host kills the invocation anyway (functionTimeout, scale-in) the jobs it held become
zombies that the sweep timer handles, exactly as for a crashed worker process.

Budget: drain seconds + shutdown grace + a margin must fit in host.json's ``functionTimeout``;
:func:`drain_budget` clamps the drain when it would not.

Why a timer and not a queue/HTTP trigger per job: chokaq's queue is the database, so there is no
Azure trigger that fires per job; a per-job HTTP push would need a dispatcher and would lose the
batching, fencing and heartbeat machinery the worker already has. A time-boxed worker reuses
all of it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import azure.functions as func

from chokaq import telemetry
from chokaq.runtime.app import ChokaQ

log = logging.getLogger("chokaq.functions.drain")

DEFAULT_DRAIN_SECONDS = 240.0
DEFAULT_IDLE_SECONDS = 20.0
DEFAULT_FUNCTION_TIMEOUT = 600.0  # Consumption plan's maximum; Flex/Premium allow more
MARGIN_SECONDS = 30.0
HOST_JSON = Path(__file__).resolve().parent.parent / "host.json"


def function_timeout(host_json: Path = HOST_JSON) -> float:
    """host.json's functionTimeout in seconds (hh:mm:ss), or the Consumption default."""
    try:
        raw = json.loads(host_json.read_text(encoding="utf-8")).get("functionTimeout")
    except (OSError, ValueError):
        return DEFAULT_FUNCTION_TIMEOUT
    m = re.fullmatch(r"(?:(\d+)\.)?(\d{1,2}):(\d{2}):(\d{2})", str(raw or ""))
    if not m:
        return DEFAULT_FUNCTION_TIMEOUT
    days, h, mi, s = (int(g) if g else 0 for g in m.groups())
    return float(days * 86400 + h * 3600 + mi * 60 + s)


def drain_budget(app: ChokaQ, environ: Mapping[str, str], timeout: float | None = None) -> tuple[float, float]:
    """(drain seconds, idle seconds), clamped so that drain + shutdown grace + margin < functionTimeout."""
    seconds = float(environ.get("CHOKAQ_DRAIN_SECONDS") or DEFAULT_DRAIN_SECONDS)
    idle = float(environ.get("CHOKAQ_DRAIN_IDLE_SECONDS") or DEFAULT_IDLE_SECONDS)
    if seconds <= 0 or idle <= 0:
        raise ValueError("CHOKAQ_DRAIN_SECONDS and CHOKAQ_DRAIN_IDLE_SECONDS must be > 0")
    limit = (timeout if timeout is not None else function_timeout()) - app.settings.execution.shutdown_grace \
        - MARGIN_SECONDS
    if seconds > limit:
        log.error("CHOKAQ_DRAIN_SECONDS=%g does not fit functionTimeout with Execution.ShutdownGrace=%g; "
                  "using %gs", seconds, app.settings.execution.shutdown_grace, max(limit, 1.0))
        seconds = max(limit, 1.0)
    return seconds, idle


async def drain(app: ChokaQ, *, seconds: float, idle_seconds: float, queues: list[str] | None = None,
                concurrency: int | None = None, tick: float = 0.1) -> dict[str, Any]:
    """Run a worker for at most ``seconds`` (less when idle for ``idle_seconds``), then stop it
    gracefully and return its counters."""
    worker = app.worker(queues=queues, concurrency=concurrency)
    started = time.monotonic()
    task = asyncio.create_task(worker.run_async(), name="chokaq-drain")
    last_busy = started
    last_started = 0
    try:
        while not task.done():
            now = time.monotonic()
            if worker.running or worker.buffer or worker.stats["started"] != last_started:
                last_busy, last_started = now, worker.stats["started"]
            if now - started >= seconds or now - last_busy >= idle_seconds:
                break
            await asyncio.sleep(tick)
    finally:
        worker.stop()
        await task
    stats = {**worker.stats, "seconds": round(time.monotonic() - started, 3)}
    log.info("drain finished: %s", stats)
    return stats


def blueprint(app: ChokaQ, environ: Mapping[str, str] = os.environ) -> func.Blueprint:
    seconds, idle = drain_budget(app, environ)
    bp = func.Blueprint()  # type: ignore[no-untyped-call]

    @bp.function_name("drain")
    @bp.timer_trigger(arg_name="timer", schedule="%CHOKAQ_DRAIN_SCHEDULE%", run_on_startup=False,
                      use_monitor=False)
    async def drain_timer(timer: func.TimerRequest) -> None:
        """Run the app's handlers for one time-boxed slice."""
        ours = telemetry.configure("chokaq-functions")
        try:
            await drain(app, seconds=seconds, idle_seconds=idle)
        finally:
            if ours:
                telemetry.shutdown()

    return bp
