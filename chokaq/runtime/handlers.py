"""What a registered job type is (``Handler``) and what its function is handed (``JobContext``).

Its own module so that the app (which registers handlers) and the worker (which runs them) both
depend on it and not on each other.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import BaseModel

from chokaq.domain.breakers import BreakerPolicy
from chokaq.domain.job_logs import JobNotes, LogLimits, encode_line

if TYPE_CHECKING:
    from chokaq.runtime.steps import StepCall

_CANCEL_LOCK = threading.Lock()

# Why the worker cancelled a running job (JobContext.cancel_reason).
CancelReason = Literal["shutdown", "heartbeat_failure", "lost_ownership", "timeout", "cancelled"]
CANCEL_SHUTDOWN: Final = "shutdown"
CANCEL_HEARTBEAT: Final = "heartbeat_failure"
CANCEL_LOST: Final = "lost_ownership"
CANCEL_TIMEOUT: Final = "timeout"
# An operator cancelled the job while it ran: it is in the DLQ as Cancelled already.
CANCEL_OPERATOR: Final = "cancelled"


@dataclass(eq=False)
class JobContext:
    """Passed to handlers that take a ``ctx`` argument."""

    job_id: str
    attempt: int
    queue: str
    type: str
    worker_id: str
    cancel_reason: CancelReason | None = None
    _flag: bool = field(default=False, repr=False)
    # Made on first use: most jobs never look, and an Event per job is a lock and a condition.
    _event: threading.Event | None = field(default=None, repr=False)
    # The worker's bounds for job logs (shared); the job's buffer is made on its first line.
    _log_limits: LogLimits | None = field(default=None, repr=False)
    _notes: JobNotes | None = field(default=None, repr=False)

    def log(self, message: str, **fields: Any) -> None:
        """Keep a line with the job (and ``fields``, shown beside it): written with the worker's next
        heartbeat and when the attempt ends. Bounded: the oldest lines go first (docs/job-logs.md)."""
        self.notes().add(encode_line("INFO", str(message), fields))

    def progress(self, done: float, total: float | None = None, note: str | None = None) -> None:
        """How far the job has got (``done`` of ``total``, numbers >= 0), shown as a progress bar."""
        self.notes().set_progress(done, total, note)

    def notes(self) -> JobNotes:
        """The job's log and progress buffer, made on first use."""
        notes = self._notes
        if notes is None:
            with _CANCEL_LOCK:
                notes = self._notes
                if notes is None:
                    notes = self._notes = JobNotes(self._log_limits or LogLimits(), self.attempt, self.worker_id)
        return notes

    # The step journal (runtime/steps.py): the worker's store, and the run's journal, made at its
    # first ctx.step (a job without steps pays nothing).
    _store: Any = field(default=None, repr=False)
    _journal: Any = field(default=None, repr=False)

    def step(self, name: str, fn: Callable[..., Any] | None = None, /, *args: Any) -> StepCall[Any]:
        """A journaled step (docs/steps.md): ``await ctx.step(name, fn, *args)`` returns ``fn``'s
        result, run once per job; ``async with ctx.step(name) as step`` (``with`` in a thread
        handler) is the block form, whose body runs only ``if not step.done``."""
        from chokaq.runtime.steps import step_call

        return step_call(self, name, fn, args)

    @property
    def cancelled(self) -> threading.Event:
        """Set when the job should stop; a handler running in a thread can wait on it."""
        if self._event is None:
            with _CANCEL_LOCK:
                if self._event is None:
                    event = threading.Event()
                    if self._flag:
                        event.set()
                    self._event = event
        return self._event

    def is_cancelled(self) -> bool:
        return self._flag

    def cancel(self, reason: CancelReason) -> None:
        with _CANCEL_LOCK:
            if self._flag:
                return
            self.cancel_reason = reason
            self._flag = True
            event = self._event
        if event is not None:
            event.set()


@dataclass(frozen=True)
class Handler:
    name: str
    fn: Callable[..., Any]
    queue: str
    payload_model: type[BaseModel] | None
    is_async: bool
    wants_ctx: bool
    idempotent: bool
    retry_zombies: bool
    timeout: float | None
    max_attempts: int | None
    # The type's circuit breaker: None follows Execution.CircuitBreaker, False never, True the
    # settings' numbers even where Enabled is off, a BreakerPolicy its own numbers.
    breaker: BreakerPolicy | bool | None = None
    # For a zombie, where this handler is loaded (a worker's own sweep): done / not_done / unknown,
    # from the payload and the step journal (runtime/verify.py, docs/steps.md).
    verify: Callable[[Any, list[Any]], Any] | None = None  # an answer, or an awaitable of one

    def parse_payload(self, text: str) -> Any:
        if self.payload_model is not None:
            return self.payload_model.model_validate_json(text)
        return json.loads(text)

    def payload_schema(self) -> dict[str, Any] | None:
        return self.payload_model.model_json_schema() if self.payload_model is not None else None
