"""The worker's helper tasks (heartbeat, finaliser, planner statistics, health file), watched.

Each is meant to run for the worker's whole life. One that ends early, by raising or by
returning, would leave the worker claiming and running jobs without it: without heartbeats its
jobs become zombies, without the finaliser no outcome is recorded. So the first helper to end stops
the worker gracefully, the reason is logged, and ``Worker.run_async`` raises :class:`HelperDied`
once the worker has shut down (the CLI exits non-zero, a process manager restarts it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from chokaq.domain.errors import ChokaQError

log = logging.getLogger("chokaq.worker")


class HelperDied(ChokaQError):
    """A worker helper task ended while the worker was running; the worker stopped because of it."""


class Supervisor:
    def __init__(self, on_failure: Callable[[str], None]) -> None:
        self._on_failure = on_failure
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self.failure: str | None = None  # why the first helper to die did

    def start(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro, name=name)
        task.add_done_callback(self._ended)
        self._tasks.append(task)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if self._closing or task.cancelled():
            return
        exc = task.exception()
        reason = f"{task.get_name()} failed: {exc!r}" if exc is not None else f"{task.get_name()} returned"
        log.error("worker helper %s; stopping the worker", reason, exc_info=exc)
        if self.failure is None:
            self.failure = reason
            self._on_failure(reason)

    async def __aenter__(self) -> Supervisor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Cancel every helper and wait for them (after the worker's shutdown: the heartbeat and the
        completer serve it to the end)."""
        self._closing = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
