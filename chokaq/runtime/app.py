"""The public entry point: ``ChokaQ``, handler registration and enqueue."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import Connection

from chokaq.domain import limits
from chokaq.domain.models import PAYLOAD_CHECKED, EnqueueRequest, SweepResult, encode_payload
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
    ) -> Callable[[F], F]:
        """Register a handler for job type ``name``.

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

        return register

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
