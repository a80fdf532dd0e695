"""Response bodies of the Workers routes (docs/workers.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from chokaq.domain.workers import HeldJob, WorkerInfo
from chokaq.operations.job_out import iso


class HeldJobOut(BaseModel):
    id: str
    queue: str
    type: str
    status: str = Field(description="Fetched or Processing (held now), or Zombie (in the DLQ)")
    at_utc: str | None = Field(description="when it started (held), or when the sweep took it (zombie)")

    @classmethod
    def of(cls, j: HeldJob) -> HeldJobOut:
        return cls(id=j.id, queue=j.queue, type=j.type, status=j.status, at_utc=iso(j.at_utc))


class WorkerOut(BaseModel):
    worker_id: str
    host: str
    pid: int
    version: str
    queues: list[str] | None = Field(description="the queues it serves; null: every queue")
    concurrency: int
    running: int = Field(description="jobs running at its last tick, as it reported them")
    started_at_utc: str | None
    last_seen_utc: str | None
    state: Literal["live", "stopped", "lost"]
    stopped_at_utc: str | None = Field(description="when it stopped, or when the sweep found it lost")
    holding: int = Field(description="jobs under its id now (Fetched or Processing)")
    zombies: int = Field(description="jobs the sweep took from it for zombies (in the DLQ now)")
    held_jobs: list[HeldJobOut] | None = Field(default=None, description="GET /api/workers/{id} only: the first 100")
    zombie_jobs: list[HeldJobOut] | None = Field(default=None, description="GET /api/workers/{id} only: the latest 100")

    @classmethod
    def of(cls, w: WorkerInfo, *, detail: bool = False) -> WorkerOut:
        return cls(
            worker_id=w.worker_id,
            host=w.host,
            pid=w.pid,
            version=w.version,
            queues=w.queues,
            concurrency=w.concurrency,
            running=w.running,
            started_at_utc=iso(w.started_at_utc),
            last_seen_utc=iso(w.last_seen_utc),
            state=w.state,
            stopped_at_utc=iso(w.stopped_at_utc),
            holding=w.holding,
            zombies=w.zombies,
            held_jobs=[HeldJobOut.of(j) for j in w.held_jobs] if detail else None,
            zombie_jobs=[HeldJobOut.of(j) for j in w.zombie_jobs] if detail else None,
        )


class WorkerListOut(BaseModel):
    items: list[WorkerOut]
    lost_after_seconds: float = Field(
        description="Recovery.ProcessingZombieTimeout: silent this long, a worker is lost"
    )
