"""Cancelling jobs: Pending ones and, when asked, ones a worker holds (Fetched or Processing).

The operator's side is one transaction: the rows leave JobsHot for JobsDLQ as ``Cancelled`` (with
who, why and, for a held job, which worker ran which attempt since when), FailedTotal is bumped and
the audit row written; on PostgreSQL a NOTIFY per held job reaches its worker at commit. That move
is the fence: the worker's later outcome (success, retry, failure) finds no row it owns and writes
nothing, so a cancel and a finish racing each other end with exactly one of them applied.

The worker's side: a worker whose heartbeat finds a job gone asks :func:`cancelled_runs` which of
them an operator cancelled (its handler is then told ``cancel_reason == "cancelled"``), and when a
cancelled handler finally stops, :func:`note_stopped` adds when to the job's DLQ row."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, and_

from chokaq.domain import limits
from chokaq.domain.attempts import bounded_text
from chokaq.domain.errors import JobValidationError
from chokaq.domain.models import Lease
from chokaq.domain.states import FailureReason, JobStatus
from chokaq.storage.admin_types import Actor, BulkResult
from chokaq.storage.dialects import profile_of
from chokaq.storage.moving import bump_stats, move_rows
from chokaq.storage.retention import Audit
from chokaq.storage.schema import jobs_dlq, jobs_hot
from chokaq.storage.sqlfuncs import utcnow
from chokaq.storage.statements import (
    FAILED,
    FETCHED,
    PENDING,
    PROCESSING,
    cancelled_runs_statement,
    status_in,
    stopped_note_statement,
)

if TYPE_CHECKING:
    from chokaq.storage.store import Storage

SAMPLE_IDS = 20
MAX_REASON_LEN = 500


def _when(value: Any) -> str:
    return value.isoformat(sep=" ", timespec="seconds") + "Z" if isinstance(value, datetime) else "?"


def cancel_details(row: dict[str, Any], actor: str, reason: str | None) -> str:
    """ErrorDetails of a cancelled job: who and why, and for a job a worker held, that its handler
    may still have been running, on which worker, at which attempt, since when."""
    head = f"Cancelled by {actor}" + (f": {reason}" if reason else "")
    status = row["Status"]
    if status == PENDING:
        return head
    state = JobStatus(status).name.capitalize()
    return (
        f"{head}\nIt was {state} on worker {row['WorkerId']} (attempt {row['AttemptCount']}, started "
        f"{_when(row['StartedAtUtc'])}, last heartbeat {_when(row['HeartbeatUtc'])}) when it was cancelled"
        + ("; its handler was still running and was told to stop." if status == PROCESSING else ".")
    )


def cancel_payload(row: dict[str, Any]) -> str:
    """What a held job's worker hears (PostgreSQL's NOTIFY): the run to stop."""
    return json.dumps({"id": row["Id"], "worker": row["WorkerId"], "attempt": row["AttemptCount"]})


def cancel_jobs(
    storage: Storage,
    audit: Audit,
    ids: Sequence[str],
    actor: Actor,
    *,
    running: bool = False,
    reason: str | None = None,
) -> BulkResult:
    """Pending jobs (and, with ``running``, Fetched and Processing ones) to the DLQ as Cancelled,
    in one transaction. Others (finished, unknown, or held when ``running`` is false) are skipped."""
    if not ids:
        raise JobValidationError("no ids given")
    if len(ids) > limits.MAX_BULK_IDS:
        raise JobValidationError(f"at most {limits.MAX_BULK_IDS} ids per request")
    if reason is not None and len(reason) > MAX_REASON_LEN:
        raise JobValidationError(f"reason: at most {MAX_REASON_LEN} characters")
    if reason is not None:
        # Stored in ErrorDetails and the audit log, shown in the Deck: redacted and storable
        # everywhere like any error text (PostgreSQL refuses NUL; no driver encodes a lone surrogate).
        reason = bounded_text(reason, MAX_REASON_LEN)
    unique = list(dict.fromkeys(ids))
    statuses = (PENDING, FETCHED, PROCESSING) if running else (PENDING,)

    def shape(r: dict[str, Any]) -> dict[str, Any]:
        return {
            "FailureReason": int(FailureReason.CANCELLED),
            "ErrorDetails": cancel_details(r, actor.name, reason),
            "LastModifiedBy": actor.name,
        }

    told: list[str] = []

    def work(c: Connection) -> BulkResult:
        where = and_(jobs_hot.c.Id.in_(unique), status_in(jobs_hot.c.Status, *statuses))
        rows = move_rows(c, jobs_hot, where, jobs_dlq, shape, {"FailedAtUtc": utcnow()})
        bump_stats(c, FAILED, Counter(r["Queue"] for r in rows))
        moved = [r["Id"] for r in rows]
        held = [r for r in rows if r["Status"] != PENDING]
        if moved:
            details: dict[str, Any] = {}
            if reason:
                details["reason"] = reason
            if held:
                details["was_running"] = [
                    {"id": r["Id"], "worker": r["WorkerId"], "attempt": r["AttemptCount"]} for r in held
                ]
            audit(c, actor, "job.cancel", moved, details or None)
        told[:] = [cancel_payload(r) for r in held]
        profile_of(c.dialect).notify_cancel(c, told)
        done = set(moved)
        return BulkResult(
            len(unique),
            len(moved),
            moved[:SAMPLE_IDS],
            skipped_ids=[i for i in unique if i not in done],
            was_running=[r["Id"] for r in held],
        )

    result = storage.write(work, op="cancel")
    storage.wakeups.cancelled(told)  # workers in this process: at once, on any database
    return result


def cancelled_runs(storage: Storage, worker_id: str, leases: Sequence[Lease]) -> set[str]:
    """The ids among ``leases`` (jobs this worker lost) that an operator cancelled at exactly the
    attempt the lease names."""
    if not leases:
        return set()
    attempts = {lease.job_id: lease.attempt for lease in leases}
    params = {"cancel_ids": list(attempts), "cancel_worker": worker_id}

    def work(c: Connection) -> set[str]:
        rows = c.execute(cancelled_runs_statement(), params).all()
        return {r[0] for r in rows if attempts.get(r[0]) == r[1]}

    return storage.read(work, op="cancelled_runs")


def note_stopped(storage: Storage, lease: Lease, note: str) -> bool:
    """Add ``note`` (when the handler finally stopped) to the DLQ row of the cancelled run
    ``lease``; False when that row is gone (purged, resurrected)."""
    params = {"note_id": lease.job_id, "note_worker": lease.worker_id, "note_attempt": lease.attempt, "note_text": note}

    def work(c: Connection) -> bool:
        return bool(c.execute(stopped_note_statement(), params).rowcount)

    return storage.write_one(work, op="note_stopped")
