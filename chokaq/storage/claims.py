"""The claim: a worker takes due Pending jobs, with queues that have MaxWorkers claimed apart under
a lock on their queue row so their limit holds."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, func, select
from sqlalchemy.sql.dml import ReturningUpdate

from chokaq.domain.models import JobRecord
from chokaq.storage import statements as st
from chokaq.storage.dialects import Profile, profile_of
from chokaq.storage.dialects.sqlserver_shapes import CteUpdate
from chokaq.storage.loop_transport import LoopTransport
from chokaq.storage.queues import QueueCache
from chokaq.storage.records import hot_record, hot_record_from_values
from chokaq.storage.schema import jobs_hot, queues
from chokaq.storage.sqlfuncs import row_lock
from chokaq.storage.statements import FETCHED, PROCESSING
from chokaq.storage.transactions import Ambiguity, Transactions

log = logging.getLogger("chokaq.storage")


@dataclass(frozen=True, slots=True)
class ClaimOptions:
    start: bool
    zombie_retry_types: tuple[str, ...]
    skip: tuple[str, ...]
    # Execution.CircuitBreaker on: types whose breaker is not closed are not claimed.
    breaker: bool = False


def run_claim(
    conn: Connection,
    worker_id: str,
    limit: int,
    queue_names: Sequence[str] | None,
    *,
    limited: bool,
    options: ClaimOptions,
) -> list[JobRecord]:
    """One claim statement on ``conn``: up to ``limit`` jobs of ``queue_names`` (all when None);
    ``limited``: of queues with MaxWorkers too (their caller holds the queue row's lock)."""
    query = claim_query(profile_of(conn.dialect), worker_id, limit, queue_names, limited=limited, options=options)
    return [] if query is None else [hot_record(r) for r in conn.execute(*query).all()]


def claim_query(
    profile: Profile,
    worker_id: str,
    limit: int,
    queue_names: Sequence[str] | None,
    *,
    limited: bool,
    options: ClaimOptions,
) -> tuple[ReturningUpdate[Any] | CteUpdate, dict[str, Any]] | None:
    """The claim statement on ``profile``'s database and its parameters (None: nothing to claim)."""
    if limit <= 0:
        return None
    params: dict[str, Any] = {"claim_worker": worker_id, "claim_skip": list(options.skip)}
    zombie_retry = options.start and bool(options.zombie_retry_types)
    stmt: ReturningUpdate[Any] | CteUpdate = profile.claim_statement(
        list(queue_names or ()), limited, limit, options.start, zombie_retry, params, options.breaker
    )
    if zombie_retry:
        params["zombie_types"] = list(options.zombie_retry_types)
    return stmt, params


class Claimer:
    """Claims for one Storage: its transactions and its cached list of MaxWorkers queues."""

    def __init__(self, tx: Transactions, queue_cache: QueueCache, prepare: Callable[[], bool]) -> None:
        self.tx = tx
        self.queue_cache = queue_cache
        # Whether the main claim may be prepared now (see Executor.run): where statistics are kept current.
        self.prepare = prepare
        # Set by a worker whose breakers are on (Storage.skip_open_breakers): every claim then
        # leaves out the types whose breaker is not closed.
        self.breaker = False

    def _limited_queues(self) -> list[str]:
        """Queues with MaxWorkers, from the cache (see :meth:`QueueCache.limited`)."""
        return self.queue_cache.limited(lambda work: self.tx.run(work, op="limited_queues", readonly=True, single=True))

    def fetch(
        self, worker_id: str, limit: int, queue_names: Sequence[str] | None, opts: ClaimOptions
    ) -> list[JobRecord]:
        """See :meth:`Storage.fetch`."""
        if self.breaker:
            opts = replace(opts, breaker=True)
        # Read before the main claim, never after it: once that has committed, a failure that
        # raises strands its jobs under this worker with nobody holding them, and nothing tells the
        # worker to reconcile (the claim's reply arrived). The list's re-read, about once a second
        # on a pooled connection of its own, is the step a database going away would hit.
        limited = [n for n in self._limited_queues() if not queue_names or n in queue_names]
        # The main claim goes straight to the driver (see executor.py); rows in HOT_ROW order.
        query = claim_query(self.tx.profile, worker_id, limit, queue_names, limited=False, options=opts)
        rows = [] if query is None else self.tx.run_statement(*query, op="fetch", prepare=self.prepare())
        claimed = [hot_record_from_values(r) for r in rows]

        def claim_limited(c: Connection) -> list[JobRecord]:
            more: list[JobRecord] = []
            for name in limited:
                room = limit - len(claimed) - len(more)
                if room <= 0:
                    break
                locked = c.execute(
                    row_lock(select(queues.c.MaxWorkers, queues.c.IsPaused).where(queues.c.Name == name), queues)
                ).first()
                if locked is None or locked.IsPaused or locked.MaxWorkers is None:
                    continue
                active = c.execute(
                    select(func.count())
                    .select_from(jobs_hot)
                    .where(jobs_hot.c.Queue == name, st.status_in(jobs_hot.c.Status, FETCHED, PROCESSING))
                ).scalar_one()
                allowance = int(locked.MaxWorkers) - int(active)
                more += run_claim(c, worker_id, min(room, allowance), [name], limited=True, options=opts)
            return more

        if limited and len(claimed) < limit:
            try:
                claimed += self.tx.write(claim_limited, op="fetch_limited")
            except Exception:
                if not claimed:
                    raise
                # The main claim has committed: raising now would strand its jobs Fetched or
                # Processing under this worker with nobody holding them. Start what it got.
                log.warning("claim of queues with MaxWorkers failed; keeping the main claim's jobs", exc_info=True)
        return in_claim_order(claimed)

    def on_loop_possible(self, queue_names: Sequence[str] | None) -> bool:
        """Whether :meth:`fetch_on_loop` can claim for ``queue_names`` now: the MaxWorkers list is
        known without a read, and none of those queues is among them (their locked claim takes a
        transaction, which stays on the threads)."""
        limited = self.queue_cache.limited_if_known()
        return limited is not None and not any(not queue_names or n in queue_names for n in limited)

    async def fetch_on_loop(
        self,
        transport: LoopTransport,
        worker_id: str,
        limit: int,
        queue_names: Sequence[str] | None,
        opts: ClaimOptions,
        seen: Ambiguity,
    ) -> list[JobRecord]:
        """The main claim of :meth:`fetch` on the worker's event loop, where
        :meth:`on_loop_possible` said so: the same statement and parameters."""
        if self.breaker:
            opts = replace(opts, breaker=True)
        query = claim_query(self.tx.profile, worker_id, limit, queue_names, limited=False, options=opts)
        if query is None:
            return []
        rows = await transport.run(*query, op="fetch", seen=seen, prepare=self.prepare())
        return in_claim_order([hot_record_from_values(r) for r in rows])


def in_claim_order(claimed: list[JobRecord]) -> list[JobRecord]:
    """RETURNING / OUTPUT rows come in no particular order; the buffer starts them in claim order."""
    claimed.sort(key=lambda j: (-(j.priority or 0), j.scheduled_at_utc or 0, j.created_at_utc or 0))
    return claimed
