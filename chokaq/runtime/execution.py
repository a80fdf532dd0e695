"""Running a started job's handler: an async handler on the worker's loop, a plain function on a
thread of its own (so it can never starve heartbeats or database calls), traced when a tracer
provider is configured, under its deadline (Handler.timeout, else Execution.DefaultTimeout), to
the :class:`Outcome` the completer writes. A run never raises: whatever the handler did becomes
an outcome (see outcomes.py)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from chokaq.domain.job_logs import LogLimits
from chokaq.domain.models import JobRecord, Lease
from chokaq.domain.states import FailureReason
from chokaq.runtime import outcomes
from chokaq.runtime.completer import Completer
from chokaq.runtime.deadlines import Deadlines
from chokaq.runtime.handlers import CANCEL_OPERATOR, CANCEL_SHUTDOWN, Handler
from chokaq.runtime.heartbeat import Heartbeat
from chokaq.runtime.job_log_capture import CURRENT_JOB, install
from chokaq.runtime.outcomes import Outcome
from chokaq.runtime.running import Running
from chokaq.runtime.slots import Slots
from chokaq.settings import ChokaQSettings
from chokaq.telemetry import instruments, tracer

if TYPE_CHECKING:
    from opentelemetry.trace import Span

log = logging.getLogger("chokaq.worker")


class Execution:
    """The handlers of one worker's jobs, from launch to outcome."""

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        settings: ChokaQSettings,
        worker_id: str,
        concurrency: int,
        slots: Slots,
        deadlines: Deadlines,
        heartbeat: Heartbeat,
        completer: Completer,
        note_stopped: Callable[[Lease, str], None] | None = None,
    ) -> None:
        self.handlers = handlers
        self.settings = settings
        self.worker_id = worker_id
        self.slots = slots
        self.deadlines = deadlines
        self.heartbeat = heartbeat  # its failure count tells a cancelled run's outcome
        self.completer = completer
        # Where a run an operator cancelled notes when its handler finally stopped (its DLQ row).
        self.note_stopped = note_stopped
        # Plain handlers get their own threads so they can never starve heartbeats or DB calls.
        self._job_pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="chokaq-job")
        self._metric_attributes: dict[tuple[str, str], dict[str, str]] = {}
        install()  # logging records emitted inside handlers go to their jobs (job_log_capture.py)
        ex = settings.execution
        # One for every job of this worker: a job's context refers to it, and copies nothing.
        self.log_limits = LogLimits(logging.getLevelName(ex.job_log_level), ex.job_log_max_lines, ex.job_log_max_chars)

    def close(self) -> None:
        """Let the handlers' threads go (a handler still running ends on its own)."""
        self._job_pool.shutdown(wait=False)

    def timeout_for(self, job_type: str) -> float:
        handler = self.handlers.get(job_type)
        return (handler.timeout if handler is not None else None) or self.settings.execution.default_timeout

    def attributes(self, rec: JobRecord) -> dict[str, str]:
        """A job's metric attributes (queue and type): one dict per pair, kept, instead of one per
        job and metric. Bounded, for a worker that meets very many queues or types."""
        key = (rec.queue, rec.type)
        attributes = self._metric_attributes.get(key)
        if attributes is None:
            if len(self._metric_attributes) >= 1024:
                self._metric_attributes.clear()
            attributes = self._metric_attributes[key] = {"queue": rec.queue, "type": rec.type}
        return attributes

    async def execute(self, run: Running) -> None:
        """Run the job's handler, then hand its outcome to the completer."""
        rec = run.record
        handler = self.handlers.get(rec.type)
        t0 = time.perf_counter()
        # Without a configured tracer provider every span is a no-op that still costs a job a
        # noticeable share of its bookkeeping; the untraced path has none.
        if run.traced:
            outcome = await self._run_traced(run, handler)
        else:
            outcome = await self._run_handler(run, handler, None)
        outcome.duration_ms = int((time.perf_counter() - t0) * 1000)
        outcome.ended = time.time()
        outcome.notes = run.ctx._notes  # what the handler logged, if anything: written with the outcome
        instruments().processing_duration.record(outcome.duration_ms, self.attributes(rec))
        self.deadlines.ended(run)
        self.slots.handler_ended(rec.id)
        self.completer.put(outcome)

    async def _run_traced(self, run: Running, handler: Handler | None) -> Outcome:
        rec = run.record
        with tracer().start_as_current_span(f"chokaq.job {rec.type}") as span:
            if span.is_recording():
                span.set_attributes(
                    {
                        "chokaq.job.id": rec.id,
                        "chokaq.queue": rec.queue,
                        "chokaq.job.type": rec.type,
                        "chokaq.attempt": rec.attempt_count,
                        "chokaq.worker": self.worker_id,
                    }
                )
            outcome = await self._run_handler(run, handler, span)
            if outcome.reason == FailureReason.TIMEOUT:
                span.set_attribute("chokaq.timeout", True)
            span.set_attribute("chokaq.outcome", outcome.kind)
        return outcome

    async def _run_handler(self, run: Running, handler: Handler | None, span: Span | None) -> Outcome:
        """Run the handler and say what its run came to (never raises)."""
        rec = run.record
        try:
            if handler is None:
                raise _Rejected(f"no handler is registered for job type {rec.type!r} on worker {self.worker_id}")
            payload = handler.parse_payload(rec.payload)
            args: tuple[object, ...] = (payload, run.ctx) if handler.wants_ctx else (payload,)
            # Its deadline (deadlines.py) cancels the task; a thread cannot be killed, so
            # cooperative plain handlers see ctx.cancelled and stop. The job is current only around
            # the handler's call: records logged there (and in its thread) are kept with it.
            token = CURRENT_JOB.set(run.ctx)
            try:
                if handler.is_async:
                    await handler.fn(*args)
                else:
                    run.thread = self._job_pool.submit(contextvars.copy_context().run, handler.fn, *args)
                    await asyncio.wrap_future(run.thread)
            finally:
                CURRENT_JOB.reset(token)
            return outcomes.succeeded(rec, run.lease)
        except _Rejected as exc:
            return outcomes.rejected(rec, run.lease, str(exc))
        except asyncio.CancelledError as exc:
            return self._cancelled_outcome(run, exc)
        except BaseException as exc:
            if span is not None:
                span.record_exception(exc)
            if run.ctx.is_cancelled():
                # Stopped by us (timeout, shutdown, lost ownership), whatever it raised on the way out.
                return self._cancelled_outcome(run, exc)
            # A TimeoutError of the handler's own (an HTTP call, say) is an ordinary failure.
            return self._failure_outcome(run, handler, exc)

    def _cancelled_outcome(self, run: Running, exc: BaseException) -> Outcome:
        outcome = outcomes.cancelled(
            run.record,
            run.lease,
            run.ctx.cancel_reason,
            thread_still_running=run.thread is not None and not run.thread.done(),
            heartbeat_failures=self.heartbeat.failures,
            timeout=self.timeout_for(run.record.type),
        )
        if outcome.kind == "drop" and run.ctx.cancel_reason == CANCEL_SHUTDOWN:
            log.error("job %s did not stop within the shutdown grace; leaving it to zombie rescue", run.record.id)
        if run.ctx.cancel_reason == CANCEL_OPERATOR:
            self._note_when_stopped(run)
        return outcome

    def _note_when_stopped(self, run: Running) -> None:
        """An operator cancelled this run: its DLQ row gets when the handler stopped. A plain
        function that does not look at ``ctx`` runs on in its thread (a thread cannot be killed):
        noted when it returns, whatever it returns, which nothing records (the fence refuses it)."""
        note = self.note_stopped
        if note is None:
            return
        thread, lease, worker = run.thread, run.lease, self.worker_id

        def stopped(_: object = None) -> None:
            when = datetime.now(UTC).isoformat(sep=" ", timespec="seconds").replace("+00:00", "Z")
            ran_on = " (its thread ended after the cancel; what it returned was discarded)" if late else ""
            note(lease, f"\nIts handler stopped at {when} on worker {worker}{ran_on}.")

        late = thread is not None and not thread.done()
        if late:
            assert thread is not None
            log.warning("job %s was cancelled, but its handler runs on in its thread", run.record.id)
            thread.add_done_callback(stopped)
        else:
            stopped()

    def _failure_outcome(self, run: Running, handler: Handler | None, exc: BaseException) -> Outcome:
        rec = run.record
        max_attempts = (handler.max_attempts if handler else None) or self.settings.retry.max_attempts
        outcome = outcomes.failed(rec, run.lease, exc, max_attempts=max_attempts, retry=self.settings.retry)
        instruments().failed.add(1, {"queue": rec.queue, "type": rec.type})
        if outcome.kind == "retry":
            log.info(
                "job %s (%s) attempt %d failed, retry in %.1fs: %s",
                rec.id,
                rec.type,
                rec.attempt_count,
                outcome.delay,
                exc,
            )
        else:
            log.warning(
                "job %s (%s) attempt %d failed -> DLQ %s: %s",
                rec.id,
                rec.type,
                rec.attempt_count,
                outcome.reason.label if outcome.reason is not None else "?",
                exc,
            )
        return outcome


class _Rejected(Exception):
    pass
