"""The step journal on the database (docs/steps.md): a worker's fenced writes, the reads of a
job's journal, and its removal with the job (purge, retention) or by a resurrect from scratch.

The worker's writes are one statement each, sent without an explicit transaction
(:meth:`Storage.write_one`), so a step costs one round trip to start and one to finish. A write
replayed after a lost reply is harmless: the start inserts only a missing row (when it inserts
nothing, the row found tells whether it was this run's), the completions set the same values again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Row

from chokaq.domain.errors import JobValidationError
from chokaq.domain.models import Lease
from chokaq.domain.steps import DONE, FAILED, RESURRECT_STEPS, ResurrectSteps, StepRecord, state_name
from chokaq.storage.statements.steps import (
    delete_steps_statement,
    journal_counts_statement,
    owned_statement,
    step_done_statement,
    step_restart_statement,
    step_start_statement,
    steps_of_statement,
)

if TYPE_CHECKING:
    from chokaq.storage.store import Storage


def _record(row: Row[Any]) -> StepRecord:
    m = row._mapping
    return StepRecord(
        name=m["Name"],
        attempt=int(m["Attempt"]),
        worker_id=m["WorkerId"],
        state=state_name(m["State"]),
        started_at_utc=m["StartedAtUtc"],
        done_at_utc=m["DoneAtUtc"],
        result=m["Result"],
    )


def steps_in(conn: Connection, job_id: str) -> list[StepRecord]:
    """The job's journal, read on ``conn`` (an operator's read or transaction)."""
    return [_record(r) for r in conn.execute(steps_of_statement(), {"step_job": job_id}).all()]


def load_steps(storage: Storage, job_id: str) -> list[StepRecord]:
    """The job's journal: read once per run, at its first step."""
    return storage.read(lambda c: steps_in(c, job_id), op="steps_load")


def delete_steps(conn: Connection, job_ids: Sequence[str]) -> int:
    """Remove the journals of ``job_ids`` in the caller's transaction (purge, resurrect from scratch)."""
    if not job_ids:
        return 0
    return int(conn.execute(delete_steps_statement(), {"step_jobs": list(job_ids)}).rowcount or 0)


def _params(lease: Lease, name: str) -> dict[str, Any]:
    return {"step_job": lease.job_id, "step_name": name, "step_worker": lease.worker_id, "step_attempt": lease.attempt}


def start_step(storage: Storage, lease: Lease, name: str, *, again: bool) -> bool:
    """Record that step ``name`` starts in this run: a new row, or (``again``) a start of an earlier
    attempt that never confirmed, taken over. False: the worker no longer holds the job at this
    attempt, and nothing was written."""
    params = _params(lease, name)
    if again:
        return bool(storage.write_one(lambda c: c.execute(step_restart_statement(), params).all(), op="step_start"))
    written = storage.write_one(lambda c: c.execute(step_start_statement(), params).all(), op="step_start")
    return bool(written) or _replayed(storage, lease, name, "started")


def finish_step(
    storage: Storage, lease: Lease, name: str, result: str | None, *, resolve: bool = False, failed: bool = False
) -> bool:
    """Record step ``name`` done with ``result`` (JSON text), or ``failed`` (its body raised;
    ``result`` then says what). ``resolve``: a start of an earlier attempt the handler established as
    done (``mark_done``). False: not the worker's job any more."""
    params = {**_params(lease, name)}
    if result is not None:
        params["step_result"] = result
    if not resolve:
        params["step_state"] = FAILED if failed else DONE
    stmt = step_done_statement(resolve, result is not None)
    written = storage.write_one(lambda c: c.execute(stmt, params).all(), op="step_done")
    return bool(written) or (resolve and _replayed(storage, lease, name, "done"))


def _replayed(storage: Storage, lease: Lease, name: str, state: str) -> bool:
    """After a write that changed nothing: whether it was this run's own write, committed behind a
    lost reply and replayed (the row is as it left it, and the job still ours), rather than a fence
    refusing it. Rare: one read."""
    params = _params(lease, name)

    def check(c: Connection) -> bool:
        if c.execute(owned_statement(), params).first() is None:
            return False
        return any(
            s.name == name and s.attempt == lease.attempt and s.worker_id == lease.worker_id and s.state == state
            for s in steps_in(c, lease.job_id)
        )

    return storage.read(check, op="step_fence")


def journal_counts(conn: Connection, job_ids: Sequence[str]) -> dict[str, int]:
    """How many journal rows each of ``job_ids`` has (jobs without a journal absent)."""
    if not job_ids:
        return {}
    return {r[0]: int(r[1]) for r in conn.execute(journal_counts_statement(), {"step_jobs": list(job_ids)}).all()}


def check_choice(steps: str | None, *, keep_steps: bool) -> None:
    if steps is not None and steps not in RESURRECT_STEPS:
        raise JobValidationError(f"steps must be one of {', '.join(RESURRECT_STEPS)}")
    if keep_steps and steps == "scratch":
        raise JobValidationError("keep_steps keeps the journal; steps=scratch clears it: choose one")


def journal_at_resurrect(
    conn: Connection, job_ids: Sequence[str], steps: ResurrectSteps | None, *, edited: bool, keep_steps: bool
) -> dict[str, Any]:
    """Apply a resurrect's choice for the journals of ``job_ids`` in its transaction, and say what
    for its audit row. ``resume`` (the default) keeps them: finished steps are replayed, a start
    never confirmed is unknown to the handler. ``scratch`` clears them. A payload edit clears them
    too (the recorded results belong to the old payload) unless ``keep_steps``."""
    check_choice(steps, keep_steps=keep_steps)
    counts = journal_counts(conn, job_ids)
    if not counts:
        return {"steps": steps} if steps is not None else {}
    choice = steps or "resume"
    details: dict[str, Any] = {"steps": choice, "journal_steps": sum(counts.values())}
    if edited:
        details["keep_steps"] = keep_steps
        if not keep_steps and choice == "resume":
            choice = "scratch"
            details["steps"] = "scratch"
            details["steps_cleared_by"] = "payload edit"
    if choice == "scratch":
        details["steps_cleared"] = delete_steps(conn, list(counts))
    return details


__all__ = [
    "check_choice",
    "delete_steps",
    "finish_step",
    "journal_at_resurrect",
    "journal_counts",
    "load_steps",
    "start_step",
    "steps_in",
]
