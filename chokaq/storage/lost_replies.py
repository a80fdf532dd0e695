"""Telling a worker's own earlier success from a conflict, after a reply was lost.

A move whose reply was lost may have committed; its replay then finds nothing to move. Only when
the earlier try may have committed (see :meth:`Transactions.ambiguity`) may "already where the move
puts it" count as success: a job that looks so for another reason (the sweep retried it as a zombie,
an operator resurrected it) was lost by this worker, and that stays a conflict.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from sqlalchemy import Table, select
from sqlalchemy.sql.elements import ColumnElement

from chokaq.domain.models import JobRecord, Lease
from chokaq.storage.records import hot_record
from chokaq.storage.schema import hot_record_columns, jobs_hot
from chokaq.storage.statements import PENDING, PROCESSING, status_is
from chokaq.storage.transactions import Transactions

T = TypeVar("T")


class LostReplies:
    """Per Storage: the moves that raised after a write that may have committed, and the reads
    that recognise their success later."""

    def __init__(self, tx: Transactions) -> None:
        self.tx = tx
        # (op, job id, attempt) of retry/reschedule calls that raised after a write that may have
        # committed: a later call for them may recognise its own success (see unheard_move).
        self._unheard: set[tuple[str, str, int]] = set()

    def unheard_move(self, op: str, leases: Sequence[Lease], run: Callable[[], T]) -> tuple[T, bool]:
        """Run a move; also say whether its rows may have moved by an earlier try of it whose reply
        was lost: in this call, or in an earlier call for the same leases that raised so. Only
        then may the caller take "already where the move puts it" for its own success."""
        keys = [(op, lease.job_id, lease.attempt) for lease in leases]
        try:
            with self.tx.ambiguity() as seen:
                result = run()
        except Exception:
            if seen.ambiguous:  # set when the block is left, exception or not
                self._unheard.update(keys)
            raise
        earlier = any(k in self._unheard for k in keys)
        self._unheard.difference_update(keys)
        return result, seen.ambiguous or earlier

    def already(
        self,
        table: Table,
        leases: Sequence[Lease],
        condition: ColumnElement[bool] | None = None,
        *,
        back_to_pending: int | None = None,
    ) -> set[str]:
        """Ids among ``leases`` whose job already is where a worker's move would have put it: a
        replay after a lost reply finds its own earlier success there, not a conflict.

        Archive or DLQ: the row names this worker and attempt (and ``condition``, e.g. the failure
        reason, so a zombie burial of our job is not taken for our own move). JobsHot
        (``back_to_pending``): Pending, no owner, at the lease's attempt less ``back_to_pending``
        (a retry keeps the attempt, a reschedule gives it back). Read only on the rare path where a
        move found fewer rows than it named.
        """
        by_id = {lease.job_id: lease for lease in leases}
        t = table.c
        query = select(t.Id, t.WorkerId, t.AttemptCount).where(t.Id.in_(list(by_id)))
        if back_to_pending is not None:
            query = query.where(status_is(t.Status, PENDING), t.WorkerId.is_(None))
        if condition is not None:
            query = query.where(condition)
        rows = self.tx.read(lambda c: c.execute(query).all(), op="recognise")
        found = set()
        for job_id, worker, attempt in rows:
            lease = by_id[job_id]
            if back_to_pending is not None:
                if attempt == lease.attempt - back_to_pending:
                    found.add(job_id)
            elif worker == lease.worker_id and attempt == lease.attempt:
                found.add(job_id)
        return found

    def started_by(self, worker_id: str, leases: Sequence[Lease]) -> list[JobRecord]:
        """Jobs among ``leases`` that a start whose reply was lost already started: Processing
        under ``worker_id`` at the attempt after the lease's."""
        by_id = {lease.job_id: lease for lease in leases}
        hot = jobs_hot.c
        query = select(*hot_record_columns).where(
            hot.Id.in_(list(by_id)), status_is(hot.Status, PROCESSING), hot.WorkerId == worker_id
        )
        rows = self.tx.read(lambda c: [hot_record(r) for r in c.execute(query).all()], op="recognise")
        return [r for r in rows if r.attempt_count == by_id[r.id].attempt + 1]
