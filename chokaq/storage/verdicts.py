"""A zombie's verdict from its handler's ``verify`` (runtime/verify.py), applied in one transaction
with its audit row: ``done`` moves the dead job to the archive (FailedTotal -1, SucceededTotal +1),
``not_done`` resurrects it (its step journal kept: resume), ``unknown`` leaves it in the DLQ and
only records the verdict. A job that left the DLQ meanwhile (an operator was quicker) is skipped."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, and_

from chokaq.domain.states import FailureReason
from chokaq.domain.steps import VERDICTS, Verdict
from chokaq.storage.admin_types import Actor
from chokaq.storage.incidents import zombies_leaving
from chokaq.storage.moving import bump_stats, move_rows
from chokaq.storage.schema import jobs_archive, jobs_dlq
from chokaq.storage.sqlfuncs import utcnow
from chokaq.storage.statements import FAILED, SUCCEEDED
from chokaq.storage.wakeups import notify

if TYPE_CHECKING:
    from chokaq.storage.admin import AdminStore

#: Who the audit log names for a verdict: the handler's code, run by a worker's sweep.
SYSTEM_VERIFY = Actor("system:verify", "admin")


def settle_verdict(admin: AdminStore, job_id: str, verdict: Verdict, note: str | None = None) -> bool:
    """Apply ``verdict`` to the dead zombie ``job_id``; False when it is no longer a dead zombie."""
    if verdict not in VERDICTS:
        raise ValueError(f"a verdict is one of {', '.join(VERDICTS)}, not {verdict!r}")
    zombie = and_(jobs_dlq.c.Id == job_id, jobs_dlq.c.FailureReason == int(FailureReason.ZOMBIE))
    details: dict[str, Any] = {"verdict": verdict, **({"note": note} if note else {})}

    def work(c: Connection) -> bool:
        if verdict == "done":
            rows = move_rows(c, jobs_dlq, zombie, jobs_archive, _archived, {"FinishedAtUtc": utcnow()})
            per_queue = Counter(r["Queue"] for r in rows)
            bump_stats(c, FAILED, per_queue, sign=-1)
            bump_stats(c, SUCCEEDED, per_queue)
        elif verdict == "not_done":
            rows = admin._resurrect_rows(c, zombie, SYSTEM_VERIFY)
            for q in {r["Queue"] for r in rows}:
                notify(c, q)
        else:
            rows = [dict(r._mapping) for r in c.execute(jobs_dlq.select().where(zombie)).all()]
        if not rows:
            return False
        # A job that left the DLQ stays counted in its crash incident (storage/incidents.py).
        extra = zombies_leaving(rows) if verdict != "unknown" else {}
        admin.audit(c, SYSTEM_VERIFY, "dlq.verify", [job_id], {**details, **extra})
        return True

    settled = admin.storage.write(work, op="verify")
    if settled and verdict == "not_done":
        admin.storage.announce()
    return settled


def _archived(row: dict[str, Any]) -> dict[str, Any]:
    started = row.get("StartedAtUtc")
    failed = row.get("FailedAtUtc")
    duration = int((failed - started).total_seconds() * 1000) if started and failed else None
    return {"LastModifiedBy": SYSTEM_VERIFY.name, "DurationMs": duration, "ScheduledAtUtc": None}


__all__ = ["SYSTEM_VERIFY", "settle_verdict"]
