"""Crash incidents: the zombies in the DLQ grouped by the worker that held them, with what their step
journals say (docs/steps.md): how many stopped inside a step (a start never confirmed), between
steps (every step recorded finished), or have no journal. One decision for an incident is a bulk
action on the DLQ filtered by ``worker`` and ``failure_reason=Zombie``, bound to its preview as
every bulk action is (a zombie that joins after the preview makes it refuse)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, case, func, select

from chokaq.domain.states import FailureReason
from chokaq.domain.steps import STARTED
from chokaq.storage.schema import job_steps, jobs_dlq

if TYPE_CHECKING:
    from chokaq.storage.store import Storage

#: Zombies read per call: an incident view of a huge DLQ shows the newest ones and says so.
MAX_ZOMBIES = 10_000


@dataclass
class Incident:
    worker_id: str | None
    jobs: int = 0
    last_seen_utc: datetime | None = None  # the last heartbeat of any of its jobs
    first_failed_utc: datetime | None = None
    last_failed_utc: datetime | None = None
    inside_step: int = 0
    between_steps: int = 0
    without_steps: int = 0
    sample_ids: list[str] = field(default_factory=list)


def crash_incidents(storage: Storage) -> tuple[list[Incident], bool]:
    """The incidents, newest first, and whether the zombies read were capped (MAX_ZOMBIES)."""
    return storage.read(_incidents, op="incidents")


def _incidents(c: Connection) -> tuple[list[Incident], bool]:
    d, s = jobs_dlq.c, job_steps.c
    steps = (
        select(
            s.JobId,
            func.count().label("n"),
            func.sum(case((s.State == STARTED, 1), else_=0)).label("started"),
        )
        .group_by(s.JobId)
        .subquery()
    )
    query = (
        select(d.Id, d.WorkerId, d.HeartbeatUtc, d.FailedAtUtc, steps.c.n, steps.c.started)
        .select_from(jobs_dlq.outerjoin(steps, steps.c.JobId == d.Id))
        .where(d.FailureReason == int(FailureReason.ZOMBIE))
        .order_by(d.FailedAtUtc.desc(), d.Id.desc())
        .limit(MAX_ZOMBIES + 1)
    )
    rows = c.execute(query).all()
    capped = len(rows) > MAX_ZOMBIES
    by_worker: dict[Any, Incident] = {}
    for job_id, worker, heartbeat, failed, n, started in rows[:MAX_ZOMBIES]:
        inc = by_worker.setdefault(worker, Incident(worker))
        inc.jobs += 1
        inc.last_seen_utc = max(filter(None, (inc.last_seen_utc, heartbeat)), default=None)
        inc.first_failed_utc = min(filter(None, (inc.first_failed_utc, failed)), default=None)
        inc.last_failed_utc = max(filter(None, (inc.last_failed_utc, failed)), default=None)
        if not n:
            inc.without_steps += 1
        elif started:
            inc.inside_step += 1
        else:
            inc.between_steps += 1
        if len(inc.sample_ids) < 20:
            inc.sample_ids.append(job_id)
    ordered = sorted(by_worker.values(), key=lambda i: i.last_failed_utc or datetime.min, reverse=True)
    return ordered, capped
