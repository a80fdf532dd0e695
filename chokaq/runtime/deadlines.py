"""Handlers' run-time limits (Handler.timeout, else Execution.DefaultTimeout): one timer per launch
batch and timeout, instead of one per job.

Jobs launched together with the same timeout share a deadline. When it passes, those of them whose
handlers still run are cancelled (the worker's ``expire``: ctx.cancel and a task cancel, as with
CANCEL_TIMEOUT before); once every handler of the batch has ended, its timer is cancelled, which
also lets go of the batch's jobs. A deadline counts from the launch, a few microseconds before the
handler's first line."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from chokaq.runtime.running import Running


@dataclass(eq=False, slots=True)
class Deadline:
    runs: list[Running]
    left: int  # handlers of the batch still running
    timer: asyncio.TimerHandle | None = None


class Deadlines:
    def __init__(self, expire: Callable[[Running], None]) -> None:
        self._expire = expire

    def watch(self, loop: asyncio.AbstractEventLoop, runs: list[Running], timeout: float) -> None:
        deadline = Deadline(runs, len(runs))
        for run in runs:
            run.deadline = deadline
        deadline.timer = loop.call_later(timeout, self._passed, deadline)

    def ended(self, run: Running) -> None:
        """The run's handler has ended (however): its deadline no longer applies."""
        deadline = run.deadline
        if deadline is None:
            return
        run.deadline = None
        deadline.left -= 1
        if not deadline.left and deadline.timer is not None:
            deadline.timer.cancel()

    def _passed(self, deadline: Deadline) -> None:
        for run in deadline.runs:
            if run.deadline is deadline:  # its handler still runs
                self._expire(run)
