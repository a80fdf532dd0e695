"""Functions-hosted execution: a timer-triggered, time-boxed worker ("drain").

Each tick runs an ordinary :class:`chokaq.runtime.worker.Worker` inside the function invocation for
at most ``CHOKAQ_DRAIN_SECONDS`` (default 240), or until it has been idle for
``CHOKAQ_DRAIN_IDLE_SECONDS`` (default 20), then stops it gracefully: no more fetches, buffered jobs
released to Pending, running handlers given ``Execution.ShutdownGrace``, unfinished ones rescheduled.
It claims through the same fenced storage calls and runs the same heartbeat task as any worker, so
if the host kills the invocation anyway (functionTimeout, scale-in) the jobs it held become
zombies that the sweep timer handles, exactly as for a crashed worker process.

Budget: drain seconds + shutdown grace + a margin must fit in the function timeout (the
``AzureFunctionsJobHost__functionTimeout`` app setting when set, else host.json's
``functionTimeout``); :func:`drain_budget` clamps the drain when it would not.

One slice per process at a time (:class:`Slices`): the timer and the doorbell's ``wake`` function
share it, and a trigger that arrives while a slice runs extends that slice instead of starting a
second worker beside it.

Why a time-boxed worker and not a trigger per job: chokaq's queue is the database, so there is no
Azure trigger that fires per job; a per-job push would need a dispatcher and would lose the
batching, fencing and heartbeat machinery the worker already has. A time-boxed worker reuses
all of it; the doorbell (functions/doorbell.py, functions/wake.py) only decides when one starts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import azure.functions as func

from chokaq import telemetry
from chokaq.runtime.app import ChokaQ
from chokaq.runtime.worker import Worker

log = logging.getLogger("chokaq.functions.drain")

DEFAULT_DRAIN_SECONDS = 240.0
DEFAULT_IDLE_SECONDS = 20.0
DEFAULT_FUNCTION_TIMEOUT = 600.0  # Consumption plan's maximum; Flex/Premium allow more
MARGIN_SECONDS = 30.0
HOST_JSON = Path(__file__).resolve().parent.parent / "host.json"


# The documented app-setting override of host.json's functionTimeout (":" is "__" in Linux env names).
TIMEOUT_OVERRIDES = ("AzureFunctionsJobHost__functionTimeout", "AzureFunctionsJobHost:functionTimeout")
_TIMESPAN = re.compile(r"(?:(\d+)\.)?(\d{1,2}):(\d{2}):(\d{2})")


def _timespan(raw: object) -> float | None:
    m = _TIMESPAN.fullmatch(str(raw or "").strip())
    if not m:
        return None
    days, h, mi, s = (int(g) if g else 0 for g in m.groups())
    return float(days * 86400 + h * 3600 + mi * 60 + s)


def function_timeout(host_json: Path = HOST_JSON, environ: Mapping[str, str] = os.environ) -> float:
    """The function timeout in seconds: the ``AzureFunctionsJobHost__functionTimeout`` app setting
    (it overrides host.json on Azure), else host.json's ``functionTimeout`` (hh:mm:ss), else the
    Consumption default. An override that is not a timespan is refused, not ignored."""
    for name in TIMEOUT_OVERRIDES:
        raw = environ.get(name)
        if raw is not None and raw.strip():
            value = _timespan(raw)
            if value is None:
                raise ValueError(f"{name}={raw!r} is not a timespan like 00:10:00")
            return value
    try:
        raw_json = json.loads(host_json.read_text(encoding="utf-8")).get("functionTimeout")
    except (OSError, ValueError):
        return DEFAULT_FUNCTION_TIMEOUT
    value = _timespan(raw_json)
    return DEFAULT_FUNCTION_TIMEOUT if value is None else value


def drain_budget(app: ChokaQ, environ: Mapping[str, str], timeout: float | None = None) -> tuple[float, float]:
    """(drain seconds, idle seconds), clamped so that drain + shutdown grace + margin < functionTimeout."""
    seconds = float(environ.get("CHOKAQ_DRAIN_SECONDS") or DEFAULT_DRAIN_SECONDS)
    idle = float(environ.get("CHOKAQ_DRAIN_IDLE_SECONDS") or DEFAULT_IDLE_SECONDS)
    if seconds <= 0 or idle <= 0:
        raise ValueError("CHOKAQ_DRAIN_SECONDS and CHOKAQ_DRAIN_IDLE_SECONDS must be > 0")
    limit = (
        (timeout if timeout is not None else function_timeout(environ=environ))
        - app.settings.execution.shutdown_grace
        - MARGIN_SECONDS
    )
    if seconds > limit:
        log.error(
            "CHOKAQ_DRAIN_SECONDS=%g does not fit functionTimeout with Execution.ShutdownGrace=%g; using %gs",
            seconds,
            app.settings.execution.shutdown_grace,
            max(limit, 1.0),
        )
        seconds = max(limit, 1.0)
    return seconds, idle


@dataclass(eq=False)
class SliceControl:
    """Shared between a running slice and the triggers that arrive during it (one event loop)."""

    worker: Worker | None = None
    closing: bool = False

    def poke(self) -> None:
        """Count as activity and make the slice's worker fetch at once."""
        if self.worker is not None:
            self.worker.wake()


async def drain(
    app: ChokaQ,
    *,
    seconds: float,
    idle_seconds: float,
    queues: list[str] | None = None,
    concurrency: int | None = None,
    control: SliceControl | None = None,
    trigger: str = "drain",
) -> dict[str, Any]:
    """Run a worker for at most ``seconds`` (less when idle for ``idle_seconds``), then stop it
    gracefully and return its counters. A poke through ``control`` counts as activity and makes the
    worker fetch at once. One INFO line per slice, naming its ``trigger``: the worker's own start and
    stop lines are DEBUG here (a ring a minute would otherwise log four lines a minute)."""
    worker = app.worker(queues=queues, concurrency=concurrency, lifecycle_level=logging.DEBUG)
    if control is not None:
        control.worker = worker  # before the first await: no trigger can come between
    started = time.monotonic()
    task = asyncio.create_task(worker.run_async(), name="chokaq-drain")
    try:
        await worker.until_idle(idle_seconds, max_seconds=seconds)
    finally:
        if control is not None:
            control.closing = True  # no await since until_idle returned: a later trigger starts anew
        worker.stop()
        await task
    stats = {**worker.stats, "seconds": round(time.monotonic() - started, 3)}
    log.info("%s: drain finished: %s", trigger, stats)
    return stats


class Slices:
    """At most one drain slice per process. ``run`` starts one, or pokes the one that is running
    (which then stays at least another idle period and fetches at once). The check and the start
    happen without an await in between, on the Functions worker's event loop, so a trigger either
    reaches a live slice or starts its own: none falls between the two."""

    def __init__(self, app: ChokaQ, environ: Mapping[str, str] = os.environ) -> None:
        self.app = app
        self.seconds, self.idle = drain_budget(app, environ)
        self._current: SliceControl | None = None
        self.started = 0
        self.poked = 0

    async def run(self, trigger: str) -> dict[str, Any] | None:
        current = self._current
        if current is not None and not current.closing:
            current.poke()
            self.poked += 1
            log.info("%s: a drain slice is running here already; extended it", trigger)
            return None
        control = self._current = SliceControl()
        self.started += 1
        try:
            return await drain(self.app, seconds=self.seconds, idle_seconds=self.idle, control=control, trigger=trigger)
        finally:
            if self._current is control:
                self._current = None


_slices: weakref.WeakKeyDictionary[ChokaQ, Slices] = weakref.WeakKeyDictionary()


def slices_for(app: ChokaQ, environ: Mapping[str, str] = os.environ) -> Slices:
    """The process's one Slices for this app (the drain timer and wake share it)."""
    if app not in _slices:
        _slices[app] = Slices(app, environ)
    return _slices[app]


def slices_of(app: ChokaQ) -> Slices | None:
    return _slices.get(app)


def blueprint(slices: Slices) -> func.Blueprint:
    bp = func.Blueprint()  # type: ignore[no-untyped-call]

    @bp.function_name("drain")
    @bp.timer_trigger(arg_name="timer", schedule="%CHOKAQ_DRAIN_SCHEDULE%", run_on_startup=False, use_monitor=False)
    async def drain_timer(timer: func.TimerRequest) -> None:
        """Run the app's handlers for one time-boxed slice (the backstop behind the doorbell)."""
        ours = telemetry.configure("chokaq-functions")
        try:
            await slices.run("drain timer")
        finally:
            if ours:
                telemetry.shutdown()

    return bp
