"""Storing new jobs: one (with its idempotency key), or many in bounded transactions, never twice
when a replay follows a lost reply; the wake-ups go out after the commit."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, false, insert, literal_column, null, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.dml import Insert
from ulid import ULID

from chokaq.domain.models import EnqueueRequest
from chokaq.storage.dialects import profile_of
from chokaq.storage.lookup import stored_ids_statement
from chokaq.storage.nulls import by_nulls
from chokaq.storage.queues import QueueCache
from chokaq.storage.schema import jobs_hot
from chokaq.storage.sqlfuncs import seconds, utc_offset, utcnow
from chokaq.storage.statements import PENDING
from chokaq.storage.statements.enqueue import enqueue_params, statement_for
from chokaq.storage.transactions import Transactions
from chokaq.storage.wakeups import Wakeups, notify


def due_in(req: EnqueueRequest, now: datetime | None = None) -> float:
    """Seconds until ``req`` is due by this host's clock: a hint for wake-ups, never stored."""
    if req.scheduled_at is None:
        return float(req.delay_seconds)
    now = now or datetime.now(UTC).replace(tzinfo=None)
    return max(0.0, (req.scheduled_at - now).total_seconds())


def new_job_id() -> str:
    # Time-ordered ids keep SQL Server's clustered primary key appending, not splitting pages.
    return str(ULID())


def bind(conn: Connection) -> Connection:
    """Prepare a caller's connection for our tables (see :meth:`Profile.bind`)."""
    return profile_of(conn.dialect).bind(conn)


def stored_among(c: Connection, ids: Sequence[str]) -> set[str]:
    """Which of ``ids`` are stored, in any of the three tables (one statement)."""
    return {r[0] for r in c.execute(stored_ids_statement(), {"stored_ids": list(ids)})}


def _insert_keyed(c: Connection, stmt: Insert, params: dict[str, Any], key: str, job_id: str) -> tuple[str, bool]:
    """The INSERT of a job with an idempotency key: ``(id, created)``, the id stored under the key
    when it is taken by a live job."""
    by_key = select(jobs_hot.c.Id).where(jobs_hot.c.IdempotencyKey == key)
    existing = c.execute(by_key).scalar()
    if existing is not None:
        # Our own id: a replay after a lost COMMIT reply meets the job this call stored.
        return existing, existing == job_id
    try:
        with c.begin_nested():
            c.execute(stmt, params)
    except IntegrityError:
        existing = c.execute(by_key).scalar()
        if existing is None:
            raise
        return existing, existing == job_id
    return job_id, True


def _insert_replayed(c: Connection, stmt: Insert, params: Any, ids: Sequence[str], *, savepoint: bool) -> bool:
    """A replay's INSERT of ``ids``, once the replay found them not stored; True if it met them
    stored after all. The lost attempt may still be running on the server (its connection is gone,
    its statement or COMMIT is not: waiting for a lock, say) and commit after that check; this
    INSERT then meets the jobs' own rows. They are stored once: no error, which a caller would
    retry into a second copy. ``savepoint``: inside a transaction, which the failed INSERT must
    not abort."""
    try:
        with c.begin_nested() if savepoint else contextlib.nullcontext():
            execute_rows(c, stmt, params)
    except IntegrityError:
        if not stored_among(c, ids):
            raise
        return True
    return False


def execute_rows(c: Connection, stmt: Insert, params: Any) -> None:
    """``stmt`` with ``params``; a list of rows as one executemany per set of None columns, those
    written as NULL in the text (nulls.py: a NULL parameter costs pyodbc a describe round trip)."""
    if not isinstance(params, list):
        c.execute(stmt, params)
        return
    for nulls, group in by_nulls(params):
        c.execute(stmt.values(**{name: null() for name in nulls}) if nulls else stmt, group)


class Enqueuer:
    """Enqueue for one Storage: its transactions, queue cache and wake-ups."""

    def __init__(self, tx: Transactions, queue_cache: QueueCache, wakeups: Wakeups) -> None:
        self.tx = tx
        self.queue_cache = queue_cache
        self.wakeups = wakeups

    def enqueue(
        self, req: EnqueueRequest, *, conn: Connection | None = None, job_id: str | None = None
    ) -> tuple[str, bool]:
        """See :meth:`Storage.enqueue`."""
        job_id = job_id or new_job_id()
        stmt = statement_for(req, notify=self.tx.profile.listen_notify)
        params = enqueue_params(job_id, req)
        # A job without a key, for a queue this process knows has its row, is one INSERT (with
        # its NOTIFY): run alone it needs no transaction, so it costs one round trip, not four.
        single = conn is None and req.idempotency_key is None and self.queue_cache.knows(req.queue)

        def work(c: Connection) -> tuple[str, bool]:
            if conn is None and self.tx.replaying() and stored_among(c, [job_id]):
                # The first attempt committed and its reply was lost; the job may have run and
                # left JobsHot since, so inserting again could store it twice.
                return job_id, True
            if not single:
                self.queue_cache.ensure(c, req.queue)
            if req.idempotency_key is not None:
                return _insert_keyed(c, stmt, params, req.idempotency_key, job_id)
            if conn is None and self.tx.replaying():
                _insert_replayed(c, stmt, params, [job_id], savepoint=not single)
            else:
                c.execute(stmt, params)
            return job_id, True

        def once() -> tuple[str, bool]:
            if self.tx.replaying():
                # A replay looks before it inserts (see work), through SQLAlchemy as before.
                return self.tx.attempt(work, readonly=False, single=True)
            # The common case straight through the driver, on a pooled connection: SQLAlchemy's
            # execution layer cost a producer five times the driver's own CPU per enqueue.
            self.tx.pooled_once(stmt, params)
            return job_id, True

        if conn is not None:
            return work(bind(conn))
        if single and self.tx.pools_driver_statements:
            result = self.tx.retrying(once, op="enqueue")
        elif single:
            result = self.tx.write_one(work, op="enqueue")
        else:
            result = self.tx.write(work, op="enqueue")
            self.queue_cache.confirm([req.queue])
        self.wakeups.announce({req.queue: due_in(req)})
        return result

    def _batch_rows(
        self, c: Connection, part: Sequence[EnqueueRequest], out: list[str], start: int, keyed: dict[int, str]
    ) -> list[dict[str, Any]]:
        """The rows of one bulk batch without a key; jobs with a key are stored one by one here,
        their ids (the stored one when the key was taken) put in ``out`` and ``keyed``."""
        rows = []
        for i, r in enumerate(part):
            self.queue_cache.ensure(c, r.queue)
            if r.idempotency_key is not None:
                out[i] = keyed[start + i] = self.enqueue(r, conn=c, job_id=out[i])[0]
                continue
            rows.append(
                {
                    "Id": out[i],
                    "Queue": r.queue,
                    "Type": r.type,
                    "Payload": r.payload,
                    "Tags": r.tags,
                    "Priority": r.priority,
                    "CreatedBy": r.created_by,
                    "delay": float(r.delay_seconds),
                }
            )
        return rows

    def enqueue_many(self, reqs: Sequence[EnqueueRequest]) -> list[str]:
        """See :meth:`Storage.enqueue_many`."""
        ids = [new_job_id() for _ in reqs]
        size = self.tx.settings.cleanup_batch_size
        # Rows typed as the driver needs them (see Profile.typed_insert_many).
        stmt = insert(jobs_hot).values(
            Status=literal_column(str(PENDING)),
            AttemptCount=literal_column("0"),
            ZombieRetry=false(),
            ScheduledAtUtc=utc_offset(seconds(name="delay")),
            CreatedAtUtc=utcnow(),
            LastUpdatedUtc=utcnow(),
        )
        stmt = self.tx.profile.typed_insert_many(stmt, jobs_hot.c.Id)

        # Per batch, what its last attempt answered for keyed jobs (the existing id under a key).
        keyed: dict[int, str] = {}

        def batch(start: int) -> Callable[[Connection], list[str]]:
            def work(c: Connection) -> list[str]:
                part = reqs[start : start + size]
                out = ids[start : start + size]
                if self.tx.replaying() and stored_among(c, out):
                    # One transaction per batch: any of its ids stored means the attempt whose
                    # reply was lost committed all of it (its jobs may have run and moved on since).
                    return [keyed.get(start + i, job_id) for i, job_id in enumerate(out)]
                rows = self._batch_rows(c, part, out, start, keyed)
                if rows and self.tx.replaying():
                    if _insert_replayed(c, stmt, rows, out, savepoint=True):
                        return [keyed.get(start + i, job_id) for i, job_id in enumerate(out)]
                elif rows:
                    execute_rows(c, stmt, rows)
                for q in sorted({r.queue for r in part}):
                    notify(c, q)
                return out

            return work

        result: list[str] = []
        for start in range(0, len(reqs), size):
            part = reqs[start : start + size]
            result += self.tx.write(batch(start), op="enqueue_many")
            self.queue_cache.confirm({r.queue for r in part})
            due: dict[str, float] = {}
            for r in part:
                due[r.queue] = min(due.get(r.queue, float(r.delay_seconds)), float(r.delay_seconds))
            self.wakeups.announce(due)
        return result
