"""``ctx.step``: a handler's steps, journaled (docs/steps.md).

``await ctx.step("charge-card", charge, order)`` runs ``charge(order)`` (sync or async) once per
job: its start is written before it runs and its result after, each awaited, fenced by this
worker and attempt. On a later attempt (a retry, a resurrected zombie) a step done earlier returns
its recorded result without running; one that started and never confirmed raises
:class:`StepOutcomeUnknown` (the handler decides: ``mark_done`` or ``run_again``); one whose body
raised runs again. ``async with ctx.step(name) as step:`` (``with`` in a thread handler) is the
block form: a block cannot be skipped, so its body checks ``step.done`` (a replayed step).

The journal is read once per run, at the run's first step: a job without steps pays nothing.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable, Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, TypeVar

from chokaq.domain.attempts import bounded_text
from chokaq.domain.models import Lease
from chokaq.domain.steps import (
    MAX_STEPS_PER_JOB,
    StepInputError,
    StepOutcomeUnknown,
    StepOwnershipLost,
    StepRecord,
    check_name,
    encode_result,
)
from chokaq.storage import finish_step, load_steps, start_step

if TYPE_CHECKING:
    from chokaq.runtime.handlers import JobContext
    from chokaq.storage import Storage, WorkerStore

T = TypeVar("T")
_FAILURE_CHARS: Final = 500

# What a planned step does: replay a recorded result, start anew, or start again over an earlier
# start (unknown and resolved by run_again, or failed).
Plan = Literal["replay", "start", "again"]


class Journal:
    """One run's view of its job's journal, loaded at the run's first step."""

    def __init__(self, ctx: JobContext, store: WorkerStore | None, storage: Storage | None = None) -> None:
        self.ctx = ctx
        self.store = store
        self.storage = storage if storage is not None else (store.storage if store is not None else None)
        self.lease = Lease(job_id=ctx.job_id, worker_id=ctx.worker_id, attempt=ctx.attempt)
        self.steps: dict[str, StepRecord] | None = None
        self.used: set[str] = set()
        self.again: set[str] = set()
        self.lock = threading.Lock()

    def _storage(self) -> Storage:
        if self.storage is None:
            raise RuntimeError("ctx.step needs a worker's storage: this context was made outside a worker")
        return self.storage

    # ------------------------------------------------------------------ the database, either way
    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self.store is not None:
            return await self.store.call(fn, *args, **kwargs)
        return await asyncio.to_thread(fn, *args, **kwargs)

    def _loaded(self, rows: list[StepRecord]) -> None:
        with self.lock:
            if self.steps is None:
                self.steps = {r.name: r for r in rows}

    async def load(self) -> None:
        if self.steps is None:
            self._loaded(await self._call(load_steps, self._storage(), self.lease.job_id))

    def load_sync(self) -> None:
        if self.steps is None:
            self._loaded(load_steps(self._storage(), self.lease.job_id))

    # ------------------------------------------------------------------ planning (no I/O)
    def plan(self, name: str, unknown: Callable[[StepRecord], Any]) -> tuple[Plan, StepRecord | None]:
        """What step ``name`` does in this run; raises on a bad or repeated name, or an unknown
        outcome (``unknown`` makes the handle the error carries)."""
        assert self.steps is not None
        with self.lock:
            if name in self.used:
                raise StepInputError(f"step {name!r} already ran in this run: a step name is unique within a job")
            record = self.steps.get(name)
            if record is not None and record.state == "done":
                self.used.add(name)
                return "replay", record
            if record is not None and record.state == "started" and name not in self.again:
                raise StepOutcomeUnknown(unknown(record), record)
            if record is None and len(self.steps) >= MAX_STEPS_PER_JOB:
                raise StepInputError(f"a job has at most {MAX_STEPS_PER_JOB} steps")
            self.used.add(name)
            return ("start" if record is None else "again"), record

    def ended(self, name: str, result: str | None, state: Literal["done", "failed"], *, attempt: int) -> None:
        with self.lock:
            assert self.steps is not None
            before = self.steps.get(name)
            self.steps[name] = StepRecord(
                name=name,
                attempt=attempt,
                worker_id=self.lease.worker_id,
                state=state,
                started_at_utc=before.started_at_utc if before is not None else None,
                done_at_utc=None,
                result=result,
            )

    def placeholder(self, name: str) -> None:
        """A start this run wrote (so a repeat of ``name`` is seen, and a later load is not needed)."""
        with self.lock:
            assert self.steps is not None
            self.steps[name] = StepRecord(name, self.lease.attempt, self.lease.worker_id, "started", None, None, None)

    def lost(self, name: str) -> StepOwnershipLost:
        from chokaq.runtime.handlers import CANCEL_LOST

        self.ctx.cancel(CANCEL_LOST)
        return StepOwnershipLost(
            f"step {name!r} was not recorded: job {self.lease.job_id} is no longer held by worker "
            f"{self.lease.worker_id} at attempt {self.lease.attempt}; the handler is cancelled"
        )


def _failure(exc: BaseException) -> str:
    return encode_result({"error": type(exc).__name__, "message": bounded_text(str(exc), _FAILURE_CHARS)}) or ""


class Step:
    """A step as the handler sees it: ``done`` when replayed (``result`` is the recorded result);
    set ``result`` in the block to record one (JSON, bounded)."""

    def __init__(self, name: str, record: StepRecord | None, done: bool) -> None:
        self.name = name
        self.previous = record
        self.done = done
        self.result: Any = record.value() if done and record is not None else None


class UnknownStep:
    """The handle a :class:`StepOutcomeUnknown` carries (async handlers): resolve the step."""

    def __init__(self, journal: Journal, record: StepRecord) -> None:
        self.journal = journal
        self.record = record
        self.name = record.name

    def run_again(self) -> None:
        """The step had no effect (checked): the next ``ctx.step`` of this name runs it again."""
        with self.journal.lock:
            self.journal.again.add(self.name)

    async def mark_done(self, result: Any = None) -> None:
        """The step had its effect (checked): record it done with ``result``; a later
        ``ctx.step`` of this name in this or any later run returns ``result`` without running."""
        text = encode_result(result)
        journal = self.journal
        if not await journal._call(finish_step, journal._storage(), journal.lease, self.name, text, resolve=True):
            raise journal.lost(self.name)
        journal.ended(self.name, text, "done", attempt=journal.lease.attempt)


class UnknownStepSync(UnknownStep):
    """:class:`UnknownStep` for thread handlers: ``mark_done`` blocks instead of being awaited."""

    def mark_done(self, result: Any = None) -> None:  # type: ignore[override]
        text = encode_result(result)
        journal = self.journal
        if not finish_step(journal._storage(), journal.lease, self.name, text, resolve=True):
            raise journal.lost(self.name)
        journal.ended(self.name, text, "done", attempt=journal.lease.attempt)


class StepCall(Generic[T]):
    """What ``ctx.step(...)`` returns: awaited (with a function), or entered as a block."""

    def __init__(
        self, journal: Journal, name: str, fn: Callable[..., T | Awaitable[T]] | None, args: tuple[Any, ...]
    ) -> None:
        self.journal = journal
        self.name = check_name(name)
        self.fn = fn
        self.args = args
        self.step: Step | None = None

    # ------------------------------------------------------------------ the function form
    def __await__(self) -> Generator[Any, None, T]:
        return self._run().__await__()

    async def _run(self) -> T:
        if self.fn is None:
            raise TypeError("await ctx.step(name, fn, *args) needs a function; use `async with ctx.step(name)`")
        step = await self.__aenter__()
        if step.done:
            await self.__aexit__(None, None, None)
            return step.result  # type: ignore[no-any-return]
        try:
            if inspect.iscoroutinefunction(self.fn):
                value = await self.fn(*self.args)
            else:
                # A plain function on a thread: it must not hold up the loop's heartbeats.
                value = await asyncio.to_thread(self.fn, *self.args)
                if inspect.isawaitable(value):
                    value = await value
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        step.result = value
        await self.__aexit__(None, None, None)
        return value  # type: ignore[no-any-return]

    def run(self) -> T:
        """The function form in a thread handler: ``ctx.step(name, fn, *args).run()``."""
        if self.fn is None:
            raise TypeError("ctx.step(name, fn, *args).run() needs a function; use `with ctx.step(name)`")
        step = self.__enter__()
        if step.done:
            self.__exit__(None, None, None)
            return step.result  # type: ignore[no-any-return]
        try:
            value = self.fn(*self.args)
            if inspect.isawaitable(value):
                raise TypeError("an async step function needs an async handler (await ctx.step(...))")
        except BaseException as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        step.result = value
        self.__exit__(None, None, None)
        return value

    # ------------------------------------------------------------------ the block form
    async def __aenter__(self) -> Step:
        journal = self.journal
        await journal.load()
        plan, record = journal.plan(self.name, lambda r: UnknownStep(journal, r))
        if plan != "replay":
            ok = await journal._call(start_step, journal._storage(), journal.lease, self.name, again=plan == "again")
            if not ok:
                raise journal.lost(self.name)
            journal.placeholder(self.name)
        self.step = Step(self.name, record, plan == "replay")
        return self.step

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        write = self._ending(exc)
        if write is not None:
            text, failed = write
            journal = self.journal
            ok = await journal._call(finish_step, journal._storage(), journal.lease, self.name, text, failed=failed)
            self._ended(ok, text, failed, exc)

    def __enter__(self) -> Step:
        journal = self.journal
        journal.load_sync()
        plan, record = journal.plan(self.name, lambda r: UnknownStepSync(journal, r))
        if plan != "replay":
            if not start_step(journal._storage(), journal.lease, self.name, again=plan == "again"):
                raise journal.lost(self.name)
            journal.placeholder(self.name)
        self.step = Step(self.name, record, plan == "replay")
        return self.step

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        write = self._ending(exc)
        if write is not None:
            text, failed = write
            journal = self.journal
            ok = finish_step(journal._storage(), journal.lease, self.name, text, failed=failed)
            self._ended(ok, text, failed, exc)

    def _ending(self, exc: BaseException | None) -> tuple[str | None, bool] | None:
        """What the block's end writes: ``(result, failed)``, or nothing (a replay; a cancel, whose
        step stays started: nobody saw how it ended)."""
        step = self.step
        if step is None or step.done:
            return None
        if exc is None:
            return encode_result(step.result), False  # a bad result raises here, before any write
        if not isinstance(exc, Exception) or self.journal.ctx.is_cancelled():
            return None
        return _failure(exc), True

    def _ended(self, ok: bool, text: str | None, failed: bool, exc: BaseException | None) -> None:
        journal = self.journal
        if not ok:
            lost = journal.lost(self.name)
            if exc is None:
                raise lost
            return  # the body's own error goes on; the handler is cancelled
        journal.ended(self.name, text, "failed" if failed else "done", attempt=journal.lease.attempt)


def step_call(ctx: JobContext, name: str, fn: Callable[..., Any] | None, args: tuple[Any, ...]) -> StepCall[Any]:
    """``ctx.step(...)``: the run's journal made at its first step."""
    journal = ctx._journal
    if journal is None:
        with _JOURNALS_LOCK:
            journal = ctx._journal
            if journal is None:
                journal = ctx._journal = Journal(ctx, ctx._store)
    return StepCall(journal, name, fn, args)


_JOURNALS_LOCK = threading.Lock()

__all__ = ["Journal", "Step", "StepCall", "UnknownStep", "UnknownStepSync", "step_call"]
