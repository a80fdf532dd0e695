"""Storing many jobs at once, all or none: one transaction, its INSERTs bounded per statement, one
NOTIFY per queue, a result per job.

Why one transaction: a producer that hands over an order's 300 jobs wants the order enqueued or
not, never 200 of them; a caller that wants bounded transactions for a million jobs calls this per
slice (``ChokaQ.enqueue_many(atomic=False)``). The statements inside stay bounded (the profile's
``insert_rows_max`` and ``insert_params_max``: SQL Server takes at most 2,100 parameters and 1,000
VALUES rows per statement), so a large batch is several statements of one transaction.

Idempotency keys are looked up in one statement for the whole batch (a list parameter), not one
job at a time: a key a live job holds answers that job's id (``created=False``); a key given
twice in the batch stores its first job, and the later ones answer that id. A key stored by a
concurrent producer between the lookup and the INSERT fails the INSERT (the unique index): the
transaction is rolled back whole and planned again, and then meets that job.

A replay after a lost reply asks, as the one-job path does, whether its first attempt committed
(any job it stored is enough: the transaction was one) and answers that attempt's result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from chokaq.domain.models import Enqueued, EnqueueRequest
from chokaq.storage.enqueue import bind, due_in, new_job_id, stored_among
from chokaq.storage.queues import QueueCache
from chokaq.storage.schema import jobs_hot
from chokaq.storage.statements.enqueue import (
    BULK_COLUMNS,
    bulk_insert_statement,
    bulk_row_columns,
    keyed_ids_statement,
)
from chokaq.storage.transactions import Transactions
from chokaq.storage.wakeups import Wakeups, notify

# Plans again after a concurrent producer took one of the batch's keys; more in a row raise.
KEY_RACES = 5


@dataclass
class Attempts:
    """What the attempts of one call saw: the last plan (the result its commit would give) and
    whether any attempt was a replay after a possibly lost reply."""

    last: list[Enqueued] | None = None
    replayed: bool = False
    created: list[str] = field(default_factory=list)


def _row(job_id: str, r: EnqueueRequest) -> dict[str, Any]:
    row: dict[str, Any] = {
        "Id": job_id,
        "Queue": r.queue,
        "Type": r.type,
        "Payload": r.payload,
        "Priority": r.priority,
    }
    # Left out when None (the column is then NULL): a NULL parameter costs pyodbc a describe round
    # trip on SQL Server. Rows are grouped by the columns they carry (see _store).
    if r.tags is not None:
        row["Tags"] = r.tags
    if r.created_by is not None:
        row["CreatedBy"] = r.created_by
    if r.scheduled_at is not None:
        row["ScheduledAtUtc"] = r.scheduled_at
    else:
        row["delay"] = float(r.delay_seconds)
    if r.idempotency_key is not None:
        row["IdempotencyKey"] = r.idempotency_key
    return row


def batch_keys(reqs: Sequence[EnqueueRequest]) -> list[str]:
    """The batch's idempotency keys, each once, in order."""
    return list(dict.fromkeys(r.idempotency_key for r in reqs if r.idempotency_key is not None))


def plan(reqs: Sequence[EnqueueRequest], ids: Sequence[str], holder: dict[str, str]) -> list[Enqueued]:
    """Each job's result, given ``holder`` (key -> the live job holding it): its own id (to be
    stored), or the id a live job or an earlier job of the batch holds under its key."""
    out: list[Enqueued] = []
    for job_id, r in zip(ids, reqs, strict=True):
        key = r.idempotency_key
        if key is not None and key in holder:
            out.append(Enqueued(holder[key], False))
            continue
        if key is not None:
            holder[key] = job_id
        out.append(Enqueued(job_id, True))
    return out


class BatchEnqueuer:
    """Bulk enqueue for one Storage: its transactions, queue cache and wake-ups."""

    def __init__(self, tx: Transactions, queue_cache: QueueCache, wakeups: Wakeups) -> None:
        self.tx = tx
        self.queue_cache = queue_cache
        self.wakeups = wakeups
        self._statements: dict[bool, Any] = {}
        self._sizes: dict[tuple[bool, bool], int] = {}

    def rows_per_statement(self, at: bool, keyed: bool) -> int:
        """How many rows one INSERT of this shape takes here, against the profile's bounds: its
        parameters per row counted in the statement as this database's compiler renders it (SQL
        Server's DATEADD binds a delay three times), or its columns where they are more (what
        SQLAlchemy's multi-row INSERT counts when it splits rows: our statements are then sent
        as they are, not split again)."""
        size = self._sizes.get((at, keyed))
        if size is None:
            columns = [*BULK_COLUMNS, "ScheduledAtUtc" if at else "delay", *(["IdempotencyKey"] if keyed else [])]
            compiled = self._statement(at).compile(dialect=self.tx.engine.dialect, column_keys=columns)
            binds = len(compiled.positiontup) if compiled.positiontup is not None else len(compiled.binds)
            per_row = max(binds, bulk_row_columns(at=at, keyed=keyed))
            profile = self.tx.profile
            size = self._sizes[at, keyed] = max(1, min(profile.insert_rows_max, profile.insert_params_max // per_row))
        return size

    def _statement(self, at: bool) -> Any:
        stmt = self._statements.get(at)
        if stmt is None:
            # Typed as the driver needs its rows (see Profile.typed_insert_many).
            stmt = self.tx.profile.typed_insert_many(bulk_insert_statement(at=at), jobs_hot.c.Id)
            self._statements[at] = stmt
        return stmt

    def enqueue_all(self, reqs: Sequence[EnqueueRequest], *, conn: Connection | None = None) -> list[Enqueued]:
        """See :meth:`Storage.enqueue_all`."""
        if not reqs:
            return []
        ids = [new_job_id() for _ in reqs]
        if conn is not None:
            return self._in_callers_transaction(bind(conn), reqs, ids)
        seen = Attempts()

        def work(c: Connection) -> list[Enqueued]:
            if self.tx.replaying():
                seen.replayed = True
                if seen.created and stored_among(c, seen.created[:1]):
                    # The attempt whose reply was lost committed; its jobs may have run since.
                    assert seen.last is not None
                    return seen.last
            return self._store(c, reqs, ids, seen)

        result = self._written(work, seen, keyed=any(r.idempotency_key for r in reqs))
        self.queue_cache.confirm({r.queue for r in reqs})
        self._announce(reqs)
        return result

    def _written(self, work: Callable[[Connection], list[Enqueued]], seen: Attempts, *, keyed: bool) -> list[Enqueued]:
        """``work`` in a write transaction, planned again (up to KEY_RACES times) when a concurrent
        producer took one of its keys; the last such error is raised."""
        for race in range(1, KEY_RACES + 1):
            try:
                return self.tx.write(work, op="enqueue_many")
            except IntegrityError:
                if seen.replayed and seen.created and self._committed(seen.created[0]):
                    # A lost attempt still running on the server committed after the replay's check.
                    assert seen.last is not None
                    return seen.last
                if not keyed or race == KEY_RACES:
                    raise
        raise AssertionError("unreachable")

    def _committed(self, job_id: str) -> bool:
        return bool(self.tx.read(lambda c: stored_among(c, [job_id]), op="enqueue_many"))

    def _in_callers_transaction(self, c: Connection, reqs: Sequence[EnqueueRequest], ids: list[str]) -> list[Enqueued]:
        """Inside the caller's transaction: a key race rolls back only a savepoint, then plans again.
        No wake-ups: the caller's commit is not ours to see (NOTIFY still rides on it)."""
        for race in range(1, KEY_RACES + 1):
            try:
                with c.begin_nested():
                    return self._store(c, reqs, ids, Attempts())
            except IntegrityError:
                if not any(r.idempotency_key for r in reqs) or race == KEY_RACES:
                    raise
        raise AssertionError("unreachable")

    def _plan(self, c: Connection, reqs: Sequence[EnqueueRequest], ids: list[str]) -> list[Enqueued]:
        """Each job's result: its own id (to be stored), or the id a live job or an earlier job of
        the batch holds under its key."""
        keys = batch_keys(reqs)
        holder: dict[str, str] = {}
        if keys:
            holder = {k: i for k, i in c.execute(keyed_ids_statement(), {"keys": keys})}
        return plan(reqs, ids, holder)

    def _store(self, c: Connection, reqs: Sequence[EnqueueRequest], ids: list[str], seen: Attempts) -> list[Enqueued]:
        for q in sorted({r.queue for r in reqs}):
            self.queue_cache.ensure(c, q)
        plan = self._plan(c, reqs, ids)
        # Rows grouped by the statement they need: due at a time or after a delay, keyed or not,
        # with tags and creator or without (an executemany's rows all carry the same columns).
        groups: dict[tuple[bool, bool, bool, bool], list[dict[str, Any]]] = {}
        for job, r in zip(plan, reqs, strict=True):
            if job.created:
                at, keyed = r.scheduled_at is not None, r.idempotency_key is not None
                shape = (at, keyed, r.tags is None, r.created_by is None)
                groups.setdefault(shape, []).append(_row(job.id, r))
        for (at, keyed, _, _), rows in sorted(groups.items()):
            size = self.rows_per_statement(at, keyed)
            for start in range(0, len(rows), size):
                c.execute(self._statement(at), rows[start : start + size])
        for q in sorted({r.queue for r in reqs}):
            notify(c, q)
        seen.last = plan
        seen.created = [j.id for j in plan if j.created]
        return plan

    def _announce(self, reqs: Sequence[EnqueueRequest]) -> None:
        announce_due(self.wakeups, reqs)


def announce_due(wakeups: Wakeups, reqs: Sequence[EnqueueRequest]) -> None:
    """Wake this process's workers for the stored batch: each queue at its soonest due job."""
    now = datetime.now(UTC).replace(tzinfo=None)
    due: dict[str, float] = {}
    for r in reqs:
        wait = due_in(r, now)
        due[r.queue] = min(due.get(r.queue, wait), wait)
    wakeups.announce(due)
