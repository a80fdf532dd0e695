"""What ``@app.job`` hands back: a typed handle on one job type.

``send_email.enqueue(Email(...))`` instead of ``app.enqueue("email_v1", {...})``: the type's name
is written once, at the decorator, and mypy checks the payload against the handler's model (the
handle is generic over it). Calling the handle calls the handler, as calling the bare function
did: tests run handlers directly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Generic, ParamSpec, TypeVar

from pydantic import BaseModel
from sqlalchemy import Connection

from chokaq.domain import limits
from chokaq.domain.models import Enqueued, EnqueueRequest
from chokaq.runtime.handlers import Handler

if TYPE_CHECKING:
    from chokaq.runtime.app import ChokaQ

__all__ = ["JobHandle"]

P = TypeVar("P", bound=BaseModel)
Params = ParamSpec("Params")
R = TypeVar("R")


class JobHandle(Generic[P, Params, R]):
    """One registered job type: enqueue it (sync, async, many) or call its handler."""

    def __init__(self, app: ChokaQ, handler: Handler, fn: Callable[Params, R]) -> None:
        self.app = app
        self.handler = handler
        self.fn = fn
        functools.update_wrapper(self, fn)

    @property
    def name(self) -> str:
        return self.handler.name

    def __call__(self, *args: Params.args, **kwargs: Params.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<JobHandle {self.name!r} queue={self.handler.queue!r}>"

    # ------------------------------------------------------------------ one job
    def prepare(
        self,
        payload: P,
        *,
        queue: str | None = None,
        priority: int = limits.DEFAULT_PRIORITY,
        delay: float = 0.0,
        at: datetime | None = None,
        tags: str | None = None,
        idempotency_key: str | None = None,
        created_by: str | None = None,
    ) -> EnqueueRequest:
        """The job, validated (payload model, limits, ``at``), not stored: for
        :meth:`ChokaQ.enqueue_many` when each job has its own options."""
        return self.app.prepare(
            self.name,
            payload,
            queue=queue,
            priority=priority,
            delay=delay,
            at=at,
            tags=tags,
            idempotency_key=idempotency_key,
            created_by=created_by,
        )

    def enqueue(
        self,
        payload: P,
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
        """Store one job; its id (a live job's id for an idempotency key it holds). ``conn``:
        inside your own transaction. ``at``: a timezone-aware time to run at (not with ``delay``)."""
        req = self.prepare(
            payload,
            queue=queue,
            priority=priority,
            delay=delay,
            at=at,
            tags=tags,
            idempotency_key=idempotency_key,
            created_by=created_by,
        )
        return self.app.submit(req, conn=conn)[0]

    async def enqueue_async(
        self,
        payload: P,
        *,
        queue: str | None = None,
        priority: int = limits.DEFAULT_PRIORITY,
        delay: float = 0.0,
        at: datetime | None = None,
        tags: str | None = None,
        idempotency_key: str | None = None,
        created_by: str | None = None,
    ) -> str:
        """:meth:`enqueue` without blocking the event loop (see :meth:`ChokaQ.enqueue_async`)."""
        req = self.prepare(
            payload,
            queue=queue,
            priority=priority,
            delay=delay,
            at=at,
            tags=tags,
            idempotency_key=idempotency_key,
            created_by=created_by,
        )
        return (await self.app.submit_async(req))[0]

    # ------------------------------------------------------------------ many jobs
    def prepare_many(
        self,
        payloads: Iterable[P],
        *,
        queue: str | None = None,
        priority: int = limits.DEFAULT_PRIORITY,
        delay: float = 0.0,
        at: datetime | None = None,
        tags: str | None = None,
        created_by: str | None = None,
    ) -> list[EnqueueRequest]:
        return [
            self.prepare(p, queue=queue, priority=priority, delay=delay, at=at, tags=tags, created_by=created_by)
            for p in payloads
        ]

    def enqueue_many(
        self,
        payloads: Iterable[P],
        *,
        queue: str | None = None,
        priority: int = limits.DEFAULT_PRIORITY,
        delay: float = 0.0,
        at: datetime | None = None,
        tags: str | None = None,
        created_by: str | None = None,
        atomic: bool = True,
        conn: Connection | None = None,
    ) -> list[Enqueued]:
        """Store a job per payload, all or none (see :meth:`ChokaQ.enqueue_many`); every payload is
        validated before anything is stored. Per-job options (an idempotency key each): build the
        jobs with :meth:`prepare` and pass them to ``app.enqueue_many``."""
        reqs = self.prepare_many(
            payloads, queue=queue, priority=priority, delay=delay, at=at, tags=tags, created_by=created_by
        )
        return self.app.enqueue_many(reqs, atomic=atomic, conn=conn)

    async def enqueue_many_async(
        self,
        payloads: Iterable[P],
        *,
        queue: str | None = None,
        priority: int = limits.DEFAULT_PRIORITY,
        delay: float = 0.0,
        at: datetime | None = None,
        tags: str | None = None,
        created_by: str | None = None,
        atomic: bool = True,
    ) -> list[Enqueued]:
        """:meth:`enqueue_many` without blocking the event loop."""
        reqs = self.prepare_many(
            payloads, queue=queue, priority=priority, delay=delay, at=at, tags=tags, created_by=created_by
        )
        return await self.app.enqueue_many_async(reqs, atomic=atomic)
