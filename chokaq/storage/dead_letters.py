"""A worker's failures (Processing -> DLQ), a batch in one transaction with one event feed row per
reason: the Deck of every process hears "N jobs dead-lettered (reason)" once per batch, never
once per job, and only for the jobs that really moved (see storage/event_feed.py)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from chokaq.domain.job_logs import Notes
from chokaq.domain.models import Lease
from chokaq.domain.states import FailureReason
from chokaq.storage import event_feed
from chokaq.storage import statements as st
from chokaq.storage.moving import run_move
from chokaq.storage.schema import jobs_dlq

if TYPE_CHECKING:
    from chokaq.storage.store import Storage


@dataclass(frozen=True)
class DeadLetter:
    """One failed attempt bound for the DLQ: ``attempts`` its history with this attempt added
    (None: kept), ``notes`` its new logs and progress."""

    lease: Lease
    reason: FailureReason
    details: str | None
    attempts: str | None = None
    notes: Notes | None = None
    queue: str = ""  # the job's queue: the batch moves in (queue, id) order (see fail_many)


def _move(c: Connection, dialect: str, f: DeadLetter) -> list[tuple[str, str]]:
    groups, params = st.fence_params(f.lease.worker_id, [f.lease], dialect)
    params["failure_reason"] = int(f.reason)
    if f.details is not None:
        params["error_details"] = f.details
    if f.attempts is not None:
        params["attempts"] = f.attempts
    written = (f.details is not None, f.attempts is not None, *(f.notes or Notes()).bind(params))
    return run_move(c, st.fail_statements(groups, *written), params)


def fail_many(storage: Storage, fails: Sequence[DeadLetter]) -> set[str]:
    """Move ``fails`` to the DLQ in one transaction, with one feed row per failure reason. Returns
    the ids moved, or already moved by a replay whose reply was lost; the others were no longer
    this worker's (a stale move)."""
    if not fails:
        return set()

    # Each move bumps its queue's StatsSummary row in the move's own statement: moving in (queue,
    # id) order locks those rows in one order in every batch, as completions do (moving.py), so
    # two workers failing jobs of the same queues cannot deadlock on them.
    ordered = sorted(fails, key=lambda f: (f.queue, f.lease.job_id))

    def work(c: Connection) -> set[str]:
        by_reason: dict[FailureReason, list[tuple[str, str]]] = defaultdict(list)
        for f in ordered:
            by_reason[f.reason] += _move(c, storage.dialect, f)
        for reason, moved in by_reason.items():
            if moved:
                event_feed.record(c, "dlq.batch", _batch(reason, moved))
        return {job_id for rows in by_reason.values() for job_id, _ in rows}

    moved = storage.write(work, op="fail")
    missing: dict[FailureReason, list[Lease]] = defaultdict(list)
    for f in fails:
        if f.lease.job_id not in moved:
            missing[f.reason].append(f.lease)
    for reason, leases in missing.items():
        moved |= storage.lost_replies.already(jobs_dlq, leases, jobs_dlq.c.FailureReason == int(reason))
    return moved


def _batch(reason: FailureReason, moved: list[tuple[str, str]]) -> dict[str, Any]:
    queues = sorted({queue for _, queue in moved})
    return {
        "reason": reason.label,
        "count": len(moved),
        "ids": [job_id for job_id, _ in moved[: event_feed.MAX_EVENT_IDS]],
        "queues": queues[:20],
    }
