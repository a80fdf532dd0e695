"""A job this worker has started and not yet finalised: its record, lease, context and the task
(and, for a plain function, the thread) running its handler."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chokaq.domain.models import JobRecord, Lease
from chokaq.runtime.handlers import CancelReason, JobContext

if TYPE_CHECKING:  # the annotation only: deadlines.py holds Running objects
    from chokaq.runtime.deadlines import Deadline


@dataclass(slots=True)
class Running:
    record: JobRecord
    lease: Lease
    ctx: JobContext
    task: asyncio.Task[None] | None = None
    thread: Future[object] | None = None  # a plain function's run (its result is not used)
    traced: bool = False
    deadline: Deadline | None = None  # set while its handler runs (see deadlines.py)

    def cancel(self, reason: CancelReason) -> None:
        """Stop the handler: its context says why (a plain function in a thread checks it, as a
        thread cannot be killed), and its task is cancelled."""
        self.ctx.cancel(reason)
        if self.task is not None and not self.task.done():
            self.task.cancel()
