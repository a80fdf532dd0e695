"""When a worker last held, took or finished a job (or was woken), for :meth:`Worker.until_idle`.
Every such change is notified, so waiting for idleness needs no polling."""

from __future__ import annotations

import time
from collections.abc import Callable

from chokaq.runtime.changes import Changes


class Activity:
    def __init__(self) -> None:
        self.last = time.monotonic()
        self.changes = Changes()
        self.ended = False  # the worker's run has returned

    def touch(self) -> None:
        """Jobs changed hands (claimed, started, finished, adopted) or the worker was woken."""
        self.last = time.monotonic()
        self.changes.notify()

    def end(self) -> None:
        self.ended = True
        self.changes.notify()

    async def until_idle(self, idle_seconds: float, max_seconds: float, *, holding: Callable[[], bool]) -> None:
        """Return once nothing happened for ``idle_seconds`` while ``holding()`` was false, after
        ``max_seconds`` at the most, or once the run has ended."""
        deadline = time.monotonic() + max_seconds
        while not self.ended:
            now = time.monotonic()
            if holding():
                self.last = now
            remaining = min(deadline, self.last + idle_seconds) - now
            if remaining <= 0:
                return
            await self.changes.changed(remaining)
