"""A worker's row in the Workers table (docs/workers.md): written at start, on every heartbeat tick
and, marked stopped, on a clean exit.

Presence is for the operator; it must never cost the worker its jobs. So each tick's write runs
beside the lease heartbeat, never in front of it: :meth:`Presence.tick` starts it as a task of its
own and returns, and a tick that finds the previous write still in flight (a slow or hung
connection) sends nothing, so a tick costs at most one statement. A failed write is logged once
(until one succeeds again) and otherwise ignored; a lost worker's next successful tick marks it
live again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from chokaq.redact import redact

log = logging.getLogger("chokaq.worker")

# How long the start and a clean exit wait for their presence writes: a hung connection must hold
# neither (at the exit the row then stays live, and the sweep marks it lost after the zombie timeout).
STOP_WAIT = 10.0


class PresenceWrites(Protocol):
    """The row's statements (:class:`~chokaq.storage.WorkerPresence`), blocking."""

    def record(self, running: int, *, starting: bool = False) -> None: ...

    def stopped(self) -> None: ...


# Runs a blocking call on the worker's database threads (:meth:`WorkerStore.call`).
OnThread = Callable[..., Awaitable[None]]


class Presence:
    def __init__(self, writes: PresenceWrites, call: OnThread, running: Callable[[], int], worker_id: str) -> None:
        self._writes = writes
        self._call = call
        self._running = running
        self._worker_id = worker_id
        self._pending: asyncio.Task[None] | None = None
        self._failing = False
        self.writes = 0  # ticks that sent a write (for the tests: at most one per tick)

    async def start(self, wait: float = STOP_WAIT) -> None:
        """The row at start-up, with this start's time (``wait`` seconds at most: the worker starts
        work either way, and its ticks write the row)."""
        try:
            await asyncio.wait_for(self._write(self._call(self._writes.record, self._running(), starting=True)), wait)
        except TimeoutError:
            log.warning("worker %s: writing its row in Workers hangs; starting without it", self._worker_id)

    def tick(self) -> None:
        """On a heartbeat tick: the row refreshed, in the background. Call it on the worker's loop."""
        if self._pending is not None and not self._pending.done():
            return  # the last one is still on its way: this tick sends nothing
        self.writes += 1
        self._pending = asyncio.create_task(
            self._write(self._call(self._writes.record, self._running())), name="chokaq-presence"
        )

    async def stop(self, wait: float = STOP_WAIT) -> None:
        """A clean exit: a refresh still in flight is let finish (it could otherwise land after the
        stop and mark the worker live again), then the row is marked stopped; ``wait`` seconds at
        most for each."""
        pending, self._pending = self._pending, None
        if pending is not None:
            await asyncio.wait([pending], timeout=wait)
            if not pending.done():
                log.warning("worker %s: its last presence write hangs; not marked stopped", self._worker_id)
                return
        try:
            await asyncio.wait_for(self._write(self._call(self._writes.stopped)), wait)
        except TimeoutError:
            log.warning("worker %s: marking its row stopped hangs; left to the sweep", self._worker_id)

    async def _write(self, write: Awaitable[None]) -> None:
        try:
            await write
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not self._failing:
                self._failing = True
                reason = redact((str(exc).strip().splitlines() or [type(exc).__name__])[0])[:300]
                log.warning(
                    "worker %s: its row in Workers was not written (%s: %s); it runs on, and says so again "
                    "only after a write succeeds (run `chokaq db upgrade` if the Workers table is missing)",
                    self._worker_id,
                    type(exc).__name__,
                    reason,
                )
            return
        if self._failing:
            self._failing = False
            log.info("worker %s: its row in Workers is written again", self._worker_id)
