"""The public entry point: ``ChokaQ``, handler registration and enqueue."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar, overload

from pydantic import BaseModel
from sqlalchemy import Connection

from chokaq.domain import limits
from chokaq.domain.breakers import BreakerPolicy
from chokaq.domain.errors import JobValidationError
from chokaq.domain.models import PAYLOAD_CHECKED, Enqueued, EnqueueRequest, SweepResult, encode_payload
from chokaq.domain.schedules import DEFAULT_MISSED_MAX, Fired, MissedPolicy, ScheduleError, ScheduleSpec
from chokaq.domain.steps import StepRecord, Verdict
from chokaq.domain.when import check_ahead, utc_naive
from chokaq.runtime.events import EventBus
from chokaq.runtime.handlers import Handler, JobContext
from chokaq.runtime.job_handle import JobHandle
from chokaq.runtime.off_loop import OffLoop
from chokaq.runtime.worker import Worker
from chokaq.settings import ChokaQSettings, load_settings
from chokaq.storage import Storage
from chokaq.telemetry import instruments

__all__ = ["ChokaQ", "Handler", "JobContext", "JobHandle"]  # the last three live beside; kept importable here

M = TypeVar("M", bound=BaseModel)
Params = ParamSpec("Params")
R = TypeVar("R")


class ChokaQ:
    """A job app: settings, storage and registered handlers.

    >>> app = ChokaQ()
    >>> @app.job("email_v1", queue="notifications", payload=EmailModel)
    ... async def send(email: EmailModel, ctx: JobContext) -> None: ...
    >>> send.enqueue(EmailModel(to="a@example.com"))
    """

    def __init__(self, settings: ChokaQSettings | None = None, **overrides: Any) -> None:
        self.settings = settings if settings is not None else load_settings(**overrides)
        self.handlers: dict[str, Handler] = {}
        # Recurring jobs declared in code (app.schedule, @app.job(schedule=)), by name.
        self.schedules: dict[str, ScheduleSpec] = {}
        # This app's live events (operator actions, its workers' outcomes, its sweeps): its own,
        # so that two apps in one process never see each other's.
        self.bus = EventBus()
        self._storage: Storage | None = None
        self._lock = threading.Lock()
        self._off_loop = OffLoop(self.settings.storage.pool_size)

    @property
    def storage(self) -> Storage:
        with self._lock:
            if self._storage is None:
                self._storage = Storage(self.settings.storage_url, settings=self.settings.storage)
            return self._storage

    def close(self) -> None:
        self._off_loop.close()
        if self._storage is not None:
            self._storage.close()
            self._storage = None

    @overload
    def job(
        self,
        name: str,
        *,
        queue: str = "default",
        payload: type[M],
        idempotent: bool = False,
        retry_zombies: bool = False,
        timeout: float | None = None,
        max_attempts: int | None = None,
        schedule: str | None = None,
        tz: str = "UTC",
        breaker: BreakerPolicy | bool | None = None,
        verify: Callable[[Any, list[StepRecord]], Verdict | Awaitable[Verdict]] | None = None,
    ) -> Callable[[Callable[Params, R]], JobHandle[M, Params, R]]: ...

    @overload
    def job(
        self,
        name: str,
        *,
        queue: str = "default",
        payload: None = None,
        idempotent: bool = False,
        retry_zombies: bool = False,
        timeout: float | None = None,
        max_attempts: int | None = None,
        schedule: str | None = None,
        tz: str = "UTC",
        breaker: BreakerPolicy | bool | None = None,
        verify: Callable[[Any, list[StepRecord]], Verdict | Awaitable[Verdict]] | None = None,
    ) -> Callable[[Callable[Params, R]], JobHandle[Any, Params, R]]: ...

    def job(
        self,
        name: str,
        *,
        queue: str = "default",
        payload: type[BaseModel] | None = None,
        idempotent: bool = False,
        retry_zombies: bool = False,
        timeout: float | None = None,
        max_attempts: int | None = None,
        schedule: str | None = None,
        tz: str = "UTC",
        breaker: BreakerPolicy | bool | None = None,
        verify: Callable[[Any, list[StepRecord]], Verdict | Awaitable[Verdict]] | None = None,
    ) -> Callable[[Callable[Params, R]], JobHandle[Any, Params, R]]:
        """Register a handler for job type ``name``; returns its typed handle (:class:`JobHandle`:
        ``handle.enqueue(payload)``, and calling it calls the handler).

        ``schedule`` (a cron expression, ``tz`` its IANA time zone): also enqueue this job with an
        empty payload on that schedule, named after the job type (see :meth:`schedule`).

        ``breaker``: this type's circuit breaker (docs/circuit-breaker.md): None follows
        Execution.CircuitBreaker, False turns it off for this type, True turns it on with the
        settings' numbers, a :class:`~chokaq.domain.breakers.BreakerPolicy` gives its own.

        ``retry_zombies=True`` (only with ``idempotent=True``) sends this handler's zombies back to
        Pending instead of the DLQ: the handler promises that running twice is harmless.

        ``verify(payload, steps)``: for a zombie of this type, where this handler is loaded (a
        worker's own sweep), says ``"done"`` (the job moves to the archive), ``"not_done"`` (back to
        Pending) or ``"unknown"`` (left in the DLQ); each verdict audited (docs/steps.md). A plain
        function or an ``async def``.
        """
        if verify is not None and not callable(verify):
            raise ValueError("verify must be a function (payload, steps) -> 'done' | 'not_done' | 'unknown'")
        if not name or len(name) > limits.MAX_TYPE_LEN:
            raise ValueError(f"job type must be 1..{limits.MAX_TYPE_LEN} characters")
        if retry_zombies and not idempotent:
            raise ValueError("retry_zombies=True needs idempotent=True: a zombie may have run already")

        def register(fn: Callable[Params, R]) -> JobHandle[Any, Params, R]:
            if name in self.handlers:
                raise ValueError(f"job type {name!r} is already registered")
            params = inspect.signature(fn).parameters
            handler = self.handlers[name] = Handler(
                name=name,
                fn=fn,
                queue=queue,
                payload_model=payload,
                is_async=asyncio.iscoroutinefunction(fn),
                wants_ctx="ctx" in params,
                idempotent=idempotent,
                retry_zombies=retry_zombies,
                timeout=timeout,
                max_attempts=max_attempts,
                breaker=breaker,
                verify=verify,
            )
            return JobHandle(self, handler, fn)

        if schedule is not None:
            self.schedule(name, schedule, job=name, tz=tz)
        return register

    def schedule(
        self,
        name: str,
        cron: str,
        *,
        job: str,
        payload: Any = None,
        queue: str | None = None,
        tz: str = "UTC",
        priority: int = limits.DEFAULT_PRIORITY,
        missed: MissedPolicy = "latest",
        missed_max: int = DEFAULT_MISSED_MAX,
    ) -> ScheduleSpec:
        """Enqueue job type ``job`` with ``payload`` at every slot of ``cron`` (five fields, or six
        with seconds first) in time zone ``tz``, once per slot however many processes run.

        ``missed``: what happens to slots missed while nothing ran (older than Schedules.MissedGrace):
        ``"latest"`` fires the newest once, ``"skip"`` none, ``"all"`` the newest ``missed_max``.
        An invalid expression or zone raises :class:`ScheduleError` here; an unknown job type or a
        payload its model refuses, when a worker or the sweep starts (:meth:`checked_schedules`).
        """
        if name in self.schedules:
            raise ScheduleError(f"schedule {name!r} is already declared")
        try:
            text = encode_payload({} if payload is None else payload)
        except ValueError as exc:
            raise ScheduleError(f"schedule {name!r}: payload: {exc}") from None
        spec = ScheduleSpec(
            name, cron, job, text, queue, tz=tz, priority=priority, missed=missed, missed_max=missed_max
        )
        self.schedules[name] = spec
        return spec

    def checked_schedules(self) -> list[ScheduleSpec]:
        """The declared schedules, each checked as its jobs will be enqueued (a registered job type,
        the handler's payload model, field limits) and with its queue resolved; the first that
        fails raises :class:`ScheduleError` naming it."""
        out = []
        for spec in self.schedules.values():
            handler = self.handlers.get(spec.job_type)
            if handler is None:
                raise ScheduleError(f"schedule {spec.name!r}: no handler for job type {spec.job_type!r}")
            try:
                req = self.prepare(spec.job_type, spec.payload_value(), queue=spec.queue, priority=spec.priority)
            except ValueError as exc:  # pydantic's ValidationError, JobValidationError
                first = str(exc).strip().splitlines()
                raise ScheduleError(
                    f"schedule {spec.name!r}: payload refused for {spec.job_type!r}: {'; '.join(first[:3])}"
                ) from None
            out.append(dataclasses.replace(spec, queue=req.queue, payload=req.payload))
        return out

    def sync_schedules(self) -> dict[str, list[str]]:
        """Check the declared schedules and upsert them into the Schedules table; rows no longer
        declared are marked orphaned. An app without handlers (``chokaq sweep`` with no ``--app``)
        knows nothing of the code's schedules and changes nothing."""
        if not self.handlers:
            return {}
        from chokaq.storage import ScheduleStore

        return ScheduleStore(self.storage).sync(self.checked_schedules())

    def fire_schedules(self) -> list[Fired]:
        """Fire the schedules due now (each slot once, whoever else fires them too)."""
        from chokaq.runtime.schedules import fire_due

        return fire_due(self.storage, self.settings)

    def prepare(
        self,
        type: str,
        payload: Any = None,
        *,
        queue: str | None = None,
        priority: int = limits.DEFAULT_PRIORITY,
        delay: float = 0.0,
        at: datetime | None = None,
        tags: str | None = None,
        idempotency_key: str | None = None,
        created_by: str | None = None,
    ) -> EnqueueRequest:
        """Validate a job at the edge: the handler's payload model (pydantic ``ValidationError``),
        JSON, size and field limits, ``at`` (timezone-aware, not with ``delay``). Nothing is stored."""
        handler = self.handlers.get(type)
        model = handler.payload_model if handler is not None else None
        if model is not None and not isinstance(payload, model):
            # Another model's instance is checked as its fields, not stored as it stands.
            fields = payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload
            payload = model.model_validate(fields if fields is not None else {})
        scheduled_at = None
        if at is not None:
            if delay:
                raise JobValidationError("give delay or at, not both")
            scheduled_at = utc_naive(at)
            check_ahead(scheduled_at, datetime.now(UTC).replace(tzinfo=None))
        text = encode_payload({} if payload is None else payload)
        return EnqueueRequest.model_validate(
            {
                "type": type,
                "payload": text,
                "queue": queue or (handler.queue if handler else "default"),
                "priority": priority,
                "delay_seconds": delay,
                "scheduled_at": scheduled_at,
                "tags": tags,
                "idempotency_key": idempotency_key,
                "created_by": created_by,
            },
            context={PAYLOAD_CHECKED: text},
        )

    def submit(self, req: EnqueueRequest, *, conn: Connection | None = None) -> tuple[str, bool]:
        """Store a prepared job. Returns ``(id, created)``; see :meth:`enqueue`."""
        job_id, created = self.storage.enqueue(req, conn=conn)
        if created:
            instruments().enqueued.add(1, {"queue": req.queue, "type": req.type})
        return job_id, created

    def enqueue(
        self,
        type: str,
        payload: Any = None,
        *,
        queue: str | None = None,
        priority: int = limits.DEFAULT_PRIORITY,
        delay: float = 0.0,
        at: datetime | None = None,
        tags: str | None = None,
        idempotency_key: str | None = None,
        created_by: str | None = None,
        conn: Connection | None = None,
    ) -> str:
        """Store a job and return its id (the existing id for a live duplicate idempotency key).

        A registered handler's payload model validates the payload here, before it is stored.
        Pass ``conn`` to store the job inside your own transaction. ``at``: a timezone-aware time
        to run at, instead of ``delay`` seconds from now.
        """
        req = self.prepare(
            type,
            payload,
            queue=queue,
            priority=priority,
            delay=delay,
            at=at,
            tags=tags,
            idempotency_key=idempotency_key,
            created_by=created_by,
        )
        return self.submit(req, conn=conn)[0]

    async def submit_async(self, req: EnqueueRequest) -> tuple[str, bool]:
        """:meth:`submit` without blocking the event loop: on it, through the database's
        asynchronous driver, where the storage has one (PostgreSQL); else on the app's producer
        threads (see off_loop.py)."""
        on_loop = self.storage.on_loop
        if not on_loop.takes([req]):
            return await self._off_loop.run(lambda: self.submit(req))
        job_id, created = await on_loop.enqueue(req)
        if created:
            instruments().enqueued.add(1, {"queue": req.queue, "type": req.type})
        return job_id, created

    async def enqueue_async(
        self,
        type: str,
        payload: Any = None,
        *,
        queue: str | None = None,
        priority: int = limits.DEFAULT_PRIORITY,
        delay: float = 0.0,
        at: datetime | None = None,
        tags: str | None = None,
        idempotency_key: str | None = None,
        created_by: str | None = None,
    ) -> str:
        """:meth:`enqueue` from an event loop, which it never blocks: validated here, stored on
        the loop through the asynchronous driver (PostgreSQL) or on the app's producer threads,
        with the same replays either way (a replay never stores a job twice)."""
        req = self.prepare(
            type,
            payload,
            queue=queue,
            priority=priority,
            delay=delay,
            at=at,
            tags=tags,
            idempotency_key=idempotency_key,
            created_by=created_by,
        )
        return (await self.submit_async(req))[0]

    def enqueue_many(
        self, reqs: Iterable[EnqueueRequest], *, atomic: bool = True, conn: Connection | None = None
    ) -> list[Enqueued]:
        """Store prepared jobs (:meth:`prepare`, ``handle.prepare``): a result per job, in order
        (its id; ``created=False`` when an idempotency key met a live job, whose id it is).

        ``atomic`` (the default): all or none, in one transaction (``conn``: yours). Otherwise
        one transaction per ``Storage.CleanupBatchSize`` jobs: a failure leaves the slices before
        it stored, and raises."""
        jobs = list(reqs)
        if atomic or conn is not None:
            out = self.storage.enqueue_all(jobs, conn=conn)
        else:
            size = self.storage.settings.cleanup_batch_size
            out = [e for i in range(0, len(jobs), size) for e in self.storage.enqueue_all(jobs[i : i + size])]
        self._count(jobs, out)
        return out

    async def enqueue_many_async(self, reqs: Iterable[EnqueueRequest], *, atomic: bool = True) -> list[Enqueued]:
        """:meth:`enqueue_many` without blocking the event loop (see :meth:`enqueue_async`)."""
        jobs = list(reqs)
        on_loop = self.storage.on_loop
        if not on_loop.takes(jobs):
            return await self._off_loop.run(lambda: self.enqueue_many(jobs, atomic=atomic))
        if atomic:
            out = await on_loop.enqueue_all(jobs)
        else:
            size = self.storage.settings.cleanup_batch_size
            out = [e for i in range(0, len(jobs), size) for e in await on_loop.enqueue_all(jobs[i : i + size])]
        self._count(jobs, out)
        return out

    @staticmethod
    def _count(reqs: Sequence[EnqueueRequest], out: Sequence[Enqueued]) -> None:
        counts: dict[tuple[str, str], int] = {}
        for r, e in zip(reqs, out, strict=True):
            if e.created:
                counts[r.queue, r.type] = counts.get((r.queue, r.type), 0) + 1
        for (queue, type_), n in counts.items():
            instruments().enqueued.add(n, {"queue": queue, "type": type_})

    def sweep(self) -> SweepResult:
        from chokaq.runtime.breakers import policies
        from chokaq.runtime.sweeper import run_sweep

        breakers = bool(policies(self.handlers, self.settings.execution.circuit_breaker))
        return run_sweep(self.storage, self.settings, events=self.bus, breakers=breakers)

    def worker(self, *, queues: list[str] | None = None, concurrency: int | None = None, **kw: Any) -> Worker:
        return Worker(self, queues=queues, concurrency=concurrency, **kw)

    def apply_queue_settings(self) -> None:
        """Write ``Queues.<name>`` settings to the queue rows (the database is what workers read)."""
        for name, qs in self.settings.queues.items():
            kw: dict[str, Any] = {}
            if qs.zombie_timeout_seconds is not None:
                kw["zombie_timeout_seconds"] = qs.zombie_timeout_seconds
            if qs.max_workers is not None:
                kw["max_workers"] = qs.max_workers
            self.storage.update_queue(name, paused=qs.paused, **kw)
