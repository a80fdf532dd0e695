"""Worker presence as the operator sees it (docs/workers.md): one row per worker process."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

WorkerState = Literal["live", "stopped", "lost"]


@dataclass(frozen=True, slots=True)
class WorkerIdentity:
    """What a worker process records of itself (the parts that do not change while it runs)."""

    worker_id: str
    host: str
    pid: int
    version: str
    queues: tuple[str, ...] | None  # None: every queue
    concurrency: int


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A Workers row, with the jobs the worker holds now and the zombies the sweep took from it."""

    worker_id: str
    host: str
    pid: int
    version: str
    queues: list[str] | None
    concurrency: int
    running: int  # as the worker last reported it
    started_at_utc: datetime
    last_seen_utc: datetime
    state: WorkerState
    stopped_at_utc: datetime | None
    holding: int = 0  # JobsHot rows under its id now (Fetched or Processing)
    zombies: int = 0  # JobsDLQ rows of reason Zombie under its id
    held_jobs: list[HeldJob] = field(default_factory=list)  # the detail view only
    zombie_jobs: list[HeldJob] = field(default_factory=list)  # the detail view only


@dataclass(frozen=True, slots=True)
class HeldJob:
    """A job a worker holds (or, in the DLQ, held when it went silent)."""

    id: str
    queue: str
    type: str
    status: str
    at_utc: datetime | None  # started (held) or failed (zombie)
