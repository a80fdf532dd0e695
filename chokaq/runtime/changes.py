"""Waiting on a worker's state by predicate: ``await changes.until(lambda: <condition>)``, or on
several sources of change at once with :func:`until`.

It is ``asyncio.Condition.wait_for`` without the lock. The worker's state changes in plain
callbacks (a handler's end, a thread-safe NOTIFY wake, the completer's hand-back) that cannot take
an asyncio lock; on one event loop they need none. What the Condition gives, and raw
``asyncio.Event`` flags did not, is kept: a waiter re-checks its own condition after every change,
so there is no shared flag that one waiter clears under another, and no gap between a check and a
wait in which a change could be missed (checking and registering happen in one place, with no
await between them). A waiter listens only to the sources that can make its condition true, so
that a change per job (a slot freed) does not wake a waiter that needs another (jobs buffered)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Changes:
    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def waiting(self) -> int:
        """How many waits are pending."""
        return len(self._waiters)

    def notify(self) -> None:
        """Something a waiter may be waiting for has changed: every waiter re-checks."""
        if not self._waiters:
            return
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            _resolve(waiter)

    async def changed(self, timeout: float | None = None) -> None:
        """Wait for the next :meth:`notify` (or ``timeout`` seconds, whichever comes first)."""
        await _next((self,), timeout)

    async def until(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Wait until ``predicate()`` holds; False if ``timeout`` seconds passed first."""
        return await until(predicate, self, timeout=timeout)


async def until(predicate: Callable[[], bool], *sources: Changes, timeout: float | None = None) -> bool:
    """Wait until ``predicate()`` holds, re-checking it whenever any of ``sources`` changes; False
    if ``timeout`` seconds passed first."""
    if timeout is None:
        while not predicate():
            await _next(sources, None)
        return True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        await _next(sources, remaining)
    return True


async def _next(sources: tuple[Changes, ...], timeout: float | None) -> None:
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    for source in sources:
        source._waiters.append(waiter)
    timer = None if timeout is None else loop.call_later(timeout, _resolve, waiter)
    try:
        await waiter
    finally:
        if timer is not None:
            timer.cancel()
        # Left by a timeout, a cancel, or another source: not kept for a notify long in coming.
        for source in sources:
            if waiter in source._waiters:
                source._waiters.remove(waiter)
