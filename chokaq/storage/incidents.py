"""Crash incidents: the zombies one worker left, grouped by that worker, with what became of them
(docs/steps.md). Those still in the DLQ need a decision, and their step journals say how many
stopped inside a step (a start never confirmed), between steps (every step recorded finished), or
have no journal. Those that left the DLQ since (resurrected, purged, or judged by the handler's
``verify``) still belong to the incident: each action that takes zombies out of the DLQ records
them, per worker, in its audit row (:func:`zombies_leaving`), and the incident counts them from
there, so an incident of 20 zombies reads "20 jobs: 12 resurrected, 8 need a decision", not 8.

One decision for an incident is a bulk action on the DLQ filtered by ``worker`` and
``failure_reason=Zombie``, bound to its preview as every bulk action is (a zombie that joins after
the preview makes it refuse)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import Connection, case, func, insert, select

from chokaq.domain import limits
from chokaq.domain.states import FailureReason
from chokaq.domain.steps import STARTED
from chokaq.storage.schema import audit_log, job_steps, jobs_dlq
from chokaq.storage.sqlfuncs import utcnow

if TYPE_CHECKING:
    from chokaq.storage.store import Storage

#: Zombies read per call: an incident view of a huge DLQ shows the newest ones and says so.
MAX_ZOMBIES = 10_000
#: Audit rows read per call for the zombies that left the DLQ (each names up to 1,000 jobs).
MAX_AUDIT_ROWS = 10_000
#: How long zombies that left the DLQ keep counting in their incident (by default; the API and the
#: CLI pass Recovery.WorkerRetention, how long the worker's own row is kept).
RESOLVED_WITHIN = timedelta(days=7)

#: The audit action of the sweep's retries of zombies (``retry_zombies`` types: never in the DLQ).
ZOMBIE_RETRY: Final = "sweep.zombie_retry"
SYSTEM_SWEEP: Final = "system:sweep"

#: The DLQ columns an action taking dead jobs out returns, for :func:`zombies_leaving`.
LEAVING: Final = (jobs_dlq.c.Id, jobs_dlq.c.WorkerId, jobs_dlq.c.FailureReason, jobs_dlq.c.FailedAtUtc,
                  jobs_dlq.c.HeartbeatUtc)  # fmt: skip
# The audit actions that take zombies out of the DLQ, and what the incident calls each.
_LEFT_BY: Final = {
    "dlq.resurrect": "resurrected",
    "dlq.purge": "purged",
    "dlq.verify": "verified",
    ZOMBIE_RETRY: "retried",
}


@dataclass
class Incident:
    worker_id: str | None
    jobs: int = 0  # all its zombies: retried by the sweep, in the DLQ, and those that left it
    retried: int = 0  # sent back to Pending by the sweep (retry_zombies): they never reached the DLQ
    undecided: int = 0  # in the DLQ now: they need a decision
    resurrected: int = 0  # left the DLQ by a resurrect (an operator's, resume or from scratch)
    purged: int = 0
    verified: int = 0  # judged by the handler's verify: done (archived) or not done (Pending)
    last_seen_utc: datetime | None = None  # the last heartbeat of any of its jobs
    first_failed_utc: datetime | None = None
    last_failed_utc: datetime | None = None
    inside_step: int = 0  # of the undecided ones
    between_steps: int = 0
    without_steps: int = 0
    sample_ids: list[str] = field(default_factory=list)  # undecided ones

    def saw(self, heartbeat: datetime | None, first: datetime | None, last: datetime | None) -> None:
        self.last_seen_utc = max(filter(None, (self.last_seen_utc, heartbeat)), default=None)
        self.first_failed_utc = min(filter(None, (self.first_failed_utc, first)), default=None)
        self.last_failed_utc = max(filter(None, (self.last_failed_utc, last)), default=None)


def zombies_leaving(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What the audit row of an action taking dead jobs out of the DLQ adds for their incidents: the
    zombies among ``rows`` (DLQ rows, with the :data:`LEAVING` columns) per worker. Nothing when
    none is a zombie."""
    groups: dict[str | None, Incident] = {}
    for r in rows:
        if int(r["FailureReason"]) != int(FailureReason.ZOMBIE):
            continue
        inc = groups.setdefault(r["WorkerId"], Incident(r["WorkerId"]))
        inc.jobs += 1
        inc.saw(r["HeartbeatUtc"], r["FailedAtUtc"], r["FailedAtUtc"])
    if not groups:
        return {}
    return {"zombies": [_left_json(i) for i in groups.values()]}


def audit_zombie_retries(c: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """The sweep's audit row for the zombies it just sent back to Pending (``rows``: their Id,
    WorkerId and HeartbeatUtc before the retry), so their worker's incident counts them."""
    now = datetime.now(UTC).replace(tzinfo=None)
    groups: dict[str | None, Incident] = {}
    for r in rows:
        inc = groups.setdefault(r["WorkerId"], Incident(r["WorkerId"]))
        inc.jobs += 1
        inc.saw(r["HeartbeatUtc"], now, now)
    ids = [r["Id"] for r in rows]
    c.execute(
        insert(audit_log).values(
            AtUtc=utcnow(),
            Actor=SYSTEM_SWEEP,
            Role="admin",
            Action=ZOMBIE_RETRY,
            JobIds=json.dumps(ids[: limits.MAX_BULK_IDS]),
            JobCount=len(ids),
            Details=json.dumps({"zombies": [_left_json(i) for i in groups.values()]}),
        )
    )


def _left_json(i: Incident) -> dict[str, Any]:
    def text(t: datetime | None) -> str | None:
        return t.isoformat() if t is not None else None  # naive UTC, as stored

    return {"worker": i.worker_id, "jobs": i.jobs, "first_failed": text(i.first_failed_utc),
            "last_failed": text(i.last_failed_utc), "last_seen": text(i.last_seen_utc)}  # fmt: skip


def crash_incidents(storage: Storage, *, resolved_within: timedelta = RESOLVED_WITHIN) -> tuple[list[Incident], bool]:
    """The incidents, newest first, and whether what was read was capped (MAX_ZOMBIES zombies in
    the DLQ, MAX_AUDIT_ROWS audit rows). Zombies that left the DLQ count for ``resolved_within``."""

    def read(c: Connection) -> tuple[list[Incident], bool]:
        by_worker: dict[Any, Incident] = {}
        capped = _undecided(c, by_worker)
        # The process's clock: a window of days does not need the database's.
        capped = _left(c, by_worker, datetime.now(UTC).replace(tzinfo=None) - resolved_within) or capped
        ordered = sorted(by_worker.values(), key=lambda i: i.last_failed_utc or datetime.min, reverse=True)
        return ordered, capped

    return storage.read(read, op="incidents")


def _undecided(c: Connection, by_worker: dict[Any, Incident]) -> bool:
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
    for job_id, worker, heartbeat, failed, n, started in rows[:MAX_ZOMBIES]:
        inc = by_worker.setdefault(worker, Incident(worker))
        inc.jobs += 1
        inc.undecided += 1
        inc.saw(heartbeat, failed, failed)
        if not n:
            inc.without_steps += 1
        elif started:
            inc.inside_step += 1
        else:
            inc.between_steps += 1
        if len(inc.sample_ids) < 20:
            inc.sample_ids.append(job_id)
    return len(rows) > MAX_ZOMBIES


def _left(c: Connection, by_worker: dict[Any, Incident], since: datetime) -> bool:
    """Add the zombies that left the DLQ since ``since``, from the audit rows that took them out."""
    a = audit_log.c
    query = (
        select(a.Action, a.Details)
        .where(a.Action.in_(list(_LEFT_BY)), a.AtUtc >= since, a.Details.like('%"zombies":%'))
        .order_by(a.AtUtc.desc())
        .limit(MAX_AUDIT_ROWS + 1)
    )
    rows = c.execute(query).all()
    for action, details in rows[:MAX_AUDIT_ROWS]:
        for z in _zombies_in(details):
            inc = by_worker.setdefault(z.get("worker"), Incident(z.get("worker")))
            n = int(z.get("jobs") or 0)
            inc.jobs += n
            setattr(inc, _LEFT_BY[action], getattr(inc, _LEFT_BY[action]) + n)
            inc.saw(_time(z.get("last_seen")), _time(z.get("first_failed")), _time(z.get("last_failed")))
    return len(rows) > MAX_AUDIT_ROWS


def _zombies_in(details: str | None) -> list[dict[str, Any]]:
    """The per-worker zombies an audit row records; none when it is not what chokaq wrote."""
    try:
        value = json.loads(details or "{}")
    except ValueError:
        return []
    zombies = value.get("zombies") if isinstance(value, dict) else None
    return [z for z in zombies if isinstance(z, dict)] if isinstance(zombies, list) else []


def _time(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None
