"""The public entry point: ``ChokaQ``, handler registration and enqueue."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import Connection

from chokaq.domain import limits
from chokaq.domain.models import PAYLOAD_CHECKED, EnqueueRequest, SweepResult, encode_payload
from chokaq.domain.schedules import DEFAULT_MISSED_MAX, Fired, MissedPolicy, ScheduleError, ScheduleSpec
from chokaq.runtime.events import EventBus
from chokaq.runtime.handlers import Handler, JobContext
from chokaq.runtime.worker import Worker
from chokaq.settings import ChokaQSettings, load_settings
from chokaq.storage import Storage
from chokaq.telemetry import instruments

__all__ = ["ChokaQ", "Handler", "JobContext"]  # the last two live in runtime.handlers; kept importable here

F = TypeVar("F", bound=Callable[..., Any])


class ChokaQ:
    """A job app: settings, storage and registered handlers.

    >>> app = ChokaQ()
    >>> @app.job("email_v1", queue="notifications", payload=EmailModel)
    ... async def send(email: EmailModel, ctx: JobContext) -> None: ...
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

    @property
    def storage(self) -> Storage:
        with self._lock:
            if self._storage is None:
                self._storage = Storage(self.settings.storage_url, settings=self.settings.storage)
            return self._storage

    def close(self) -> None:
        if self._storage is not None:
            self._storage.close()
            self._storage = None

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
    ) -> Callable[[F], F]:
        """Register a handler for job type ``name``.

        ``schedule`` (a cron expression, ``tz`` its IANA time zone): also enqueue this job with an
        empty payload on that schedule, named after the job type (see :meth:`schedule`).

        ``retry_zombies=True`` (only with ``idempotent=True``) sends this handler's zombies back to
        Pending instead of the DLQ: the handler promises that running twice is harmless.
        """
        if not name or len(name) > limits.MAX_TYPE_LEN:
            raise ValueError(f"job type must be 1..{limits.MAX_TYPE_LEN} characters")
        if retry_zombies and not idempotent:
            raise ValueError("retry_zombies=True needs idempotent=True: a zombie may have run already")

        def register(fn: F) -> F:
            if name in self.handlers:
                raise ValueError(f"job type {name!r} is already registered")
            params = inspect.signature(fn).parameters
            self.handlers[name] = Handler(
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
            )
            return fn

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
        tags: str | None = None,
        idempotency_key: str | None = None,
        created_by: str | None = None,
    ) -> EnqueueRequest:
        """Validate a job at the edge: the handler's payload model (pydantic ``ValidationError``),
        JSON, size and field limits. Nothing is stored."""
        handler = self.handlers.get(type)
        if handler is not None and handler.payload_model is not None and not isinstance(payload, BaseModel):
            payload = handler.payload_model.model_validate(payload if payload is not None else {})
        text = encode_payload({} if payload is None else payload)
        return EnqueueRequest.model_validate(
            {
                "type": type,
                "payload": text,
                "queue": queue or (handler.queue if handler else "default"),
                "priority": priority,
                "delay_seconds": delay,
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
        tags: str | None = None,
        idempotency_key: str | None = None,
        created_by: str | None = None,
        conn: Connection | None = None,
    ) -> str:
        """Store a job and return its id (the existing id for a live duplicate idempotency key).

        A registered handler's payload model validates the payload here, before it is stored.
        Pass ``conn`` to store the job inside your own transaction.
        """
        req = self.prepare(
            type,
            payload,
            queue=queue,
            priority=priority,
            delay=delay,
            tags=tags,
            idempotency_key=idempotency_key,
            created_by=created_by,
        )
        return self.submit(req, conn=conn)[0]

    def sweep(self) -> SweepResult:
        from chokaq.runtime.sweeper import run_sweep

        return run_sweep(self.storage, self.settings, events=self.bus)

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
