"""Worker presence in the database (the Workers table, docs/workers.md).

:class:`WorkerPresence` is one worker process's writes: its row upserted at start and on each
heartbeat tick (one statement), marked stopped on a clean exit. :class:`WorkerDirectory` is the
operator's reads (each worker with the jobs it holds now and the zombies the sweep took from it)
and the sweep's part (silent workers marked lost, old stopped and lost rows pruned).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from sqlalchemy import Connection, case, func, literal_column, select
from sqlalchemy.sql.elements import ColumnElement

from chokaq.domain.states import FailureReason, JobStatus
from chokaq.domain.workers import HeldJob, WorkerIdentity, WorkerInfo, WorkerState
from chokaq.storage.schema import jobs_dlq, jobs_hot, workers
from chokaq.storage.statements.status import FETCHED, PROCESSING, status_in
from chokaq.storage.statements.workers import (
    LIVE,
    LOST,
    STATES,
    lost_statement,
    presence_statement,
    prune_statement,
    stopped_statement,
)
from chokaq.storage.store import Storage

# The list's bound: a fleet scaled up and down leaves many stopped rows until they are pruned.
LIST_MAX = 500
# The detail's bound on the jobs it names (its counts are exact).
JOBS_MAX = 100

_w = workers.c
_ZOMBIE: ColumnElement[Any] = literal_column(str(int(FailureReason.ZOMBIE)))


class WorkerPresence:
    """One worker process's row. Each call is one statement; the caller decides what a failure costs
    (the worker logs it and carries on: presence never stops work)."""

    def __init__(self, storage: Storage, identity: WorkerIdentity) -> None:
        self.storage = storage
        self.identity = identity
        self._params: dict[str, Any] = {
            "worker_id": identity.worker_id,
            "worker_host": identity.host,
            "worker_pid": identity.pid,
            "worker_version": identity.version,
            "worker_concurrency": identity.concurrency,
        }
        if identity.queues is not None:
            self._params["worker_queues"] = json.dumps(list(identity.queues))

    def record(self, running: int, *, starting: bool = False) -> None:
        """Live now, running ``running`` jobs (``starting``: its start time set too)."""
        stmt = presence_statement(self.storage.dialect, starting, self.identity.queues is None)
        params = {**self._params, "worker_running": running}
        self.storage.tx.write_one(lambda c: c.execute(stmt, params), op="worker_presence")

    def stopped(self) -> None:
        """A clean exit."""
        keys = ("worker_id", "worker_host", "worker_pid")
        params = {k: self._params[k] for k in keys}
        self.storage.tx.write_one(lambda c: c.execute(stopped_statement(), params), op="worker_stopped")


class WorkerDirectory:
    """The operator's view of the workers, and the sweep's upkeep of their rows."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def sweep(self, *, silent_for: float, retention: float, batch_size: int | None = None) -> tuple[int, int]:
        """Live workers silent for ``silent_for`` seconds marked lost; stopped and lost rows older
        than ``retention`` seconds deleted, a batch at a time. Returns (marked lost, pruned)."""
        size = self.storage.tx.profile.statement_rows(batch_size or self.storage.settings.cleanup_batch_size)
        tx = self.storage.tx
        lost = tx.write(lambda c: int(c.execute(lost_statement(silent_for)).rowcount or 0), op="workers_lost")
        pruned = 0
        prune = prune_statement(retention, size)
        while True:
            n = tx.write(lambda c: int(c.execute(prune).rowcount or 0), op="workers_prune")
            pruned += n
            if n < size:
                return lost, pruned

    def list(self, state: WorkerState | None = None) -> list[WorkerInfo]:
        """Live workers first (then stopped and lost), the most recently seen first in each."""
        order = case({LIVE: 0, LOST: 1}, value=_w.State, else_=2)
        stmt = select(workers).order_by(order, _w.LastSeenUtc.desc(), _w.WorkerId).limit(LIST_MAX)
        if state is not None:
            stmt = stmt.where(_w.State == state)

        def work(c: Connection) -> list[WorkerInfo]:
            rows = [_info(r) for r in c.execute(stmt).all()]
            if not rows:
                return []
            ids = [w.worker_id for w in rows]
            holding = _counts(c, jobs_hot, ids, status_in(jobs_hot.c.Status, FETCHED, PROCESSING))
            zombies = _counts(c, jobs_dlq, ids, jobs_dlq.c.FailureReason == _ZOMBIE)
            return [replace(w, holding=holding.get(w.worker_id, 0), zombies=zombies.get(w.worker_id, 0)) for w in rows]

        return self.storage.read(work, op="list_workers")

    def get(self, worker_id: str) -> WorkerInfo | None:
        """One worker with the jobs it holds and its zombies (the first :data:`JOBS_MAX` of each)."""

        def work(c: Connection) -> WorkerInfo | None:
            row = c.execute(select(workers).where(_w.WorkerId == worker_id)).first()
            if row is None:
                return None
            hot, dlq = jobs_hot.c, jobs_dlq.c
            held_where = (hot.WorkerId == worker_id) & status_in(hot.Status, FETCHED, PROCESSING)
            zombie_where = (dlq.WorkerId == worker_id) & (dlq.FailureReason == _ZOMBIE)
            held = c.execute(
                select(hot.Id, hot.Queue, hot.Type, hot.Status, hot.StartedAtUtc)
                .where(held_where)
                .order_by(hot.Id)
                .limit(JOBS_MAX)
            ).all()
            zombies = c.execute(
                select(dlq.Id, dlq.Queue, dlq.Type, dlq.FailedAtUtc)
                .where(zombie_where)
                .order_by(dlq.FailedAtUtc.desc(), dlq.Id)
                .limit(JOBS_MAX)
            ).all()
            n_held = c.execute(select(func.count()).select_from(jobs_hot).where(held_where)).scalar_one()
            n_zombies = c.execute(select(func.count()).select_from(jobs_dlq).where(zombie_where)).scalar_one()
            return replace(
                _info(row),
                holding=int(n_held),
                zombies=int(n_zombies),
                held_jobs=[HeldJob(r[0], r[1], r[2], JobStatus(int(r[3])).name.capitalize(), r[4]) for r in held],
                zombie_jobs=[HeldJob(r[0], r[1], r[2], "Zombie", r[3]) for r in zombies],
            )

        return self.storage.read(work, op="get_worker")


def _counts(c: Connection, table: Any, ids: Sequence[str], where: Any) -> dict[str, int]:
    stmt = (
        select(table.c.WorkerId, func.count()).where(table.c.WorkerId.in_(list(ids)), where).group_by(table.c.WorkerId)
    )
    return {r[0]: int(r[1]) for r in c.execute(stmt).all()}


def _info(row: Any) -> WorkerInfo:
    m = row._mapping
    state = m["State"] if m["State"] in STATES else LOST
    return WorkerInfo(
        worker_id=m["WorkerId"],
        host=m["Host"],
        pid=int(m["Pid"]),
        version=m["Version"],
        queues=json.loads(m["Queues"]) if m["Queues"] else None,
        concurrency=int(m["Concurrency"]),
        running=int(m["Running"]),
        started_at_utc=m["StartedAtUtc"],
        last_seen_utc=m["LastSeenUtc"],
        state=cast(WorkerState, state),
        stopped_at_utc=m["StoppedAtUtc"],
    )
