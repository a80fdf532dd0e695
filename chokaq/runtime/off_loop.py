"""Producer calls from an event loop, run on threads of their own so that the loop never waits
for the database.

Why threads and not the worker's loop transport (storage/loop_transport.py): that transport runs
single statements without a transaction and belongs to one loop, which must close it before it
ends; a producer's loop (a web framework's) gives chokaq no such moment, and an enqueue with an
idempotency key, or many jobs, is a transaction. On a thread the call is the synchronous one,
with its replays and lost-reply rules exactly: a replayed INSERT never stores a job twice.

The threads are the app's own, as many as its pool has connections: the loop's default executor
is shared with everything else ``asyncio.to_thread`` runs, and an outage (calls replaying for
seconds) must not take it over. A call's context (OpenTelemetry's current span) goes with it.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class OffLoop:
    """A lazily started pool of producer threads."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.size, thread_name_prefix="chokaq-producer")
            return self._pool

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` on a producer thread. Cancelling the await does not stop the call: once sent,
        a statement may commit whatever the caller does next (see docs/producers.md)."""
        ctx = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self._executor(), ctx.run, fn)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
