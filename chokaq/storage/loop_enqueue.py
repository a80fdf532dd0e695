"""PostgreSQL: a producer's ``enqueue_async`` on its own event loop, through psycopg's
``AsyncConnection`` (loop_transport.py), instead of on the app's producer threads.

Why: on a thread, an enqueue costs the loop two thread hand-offs and the thread's Python work
competes with the loop for the GIL; on the loop it is one socket readiness event, and the loop
serves other requests while the statement is out. Where there is no asynchronous driver (SQLite,
SQL Server) the profile says so and enqueues stay on threads (runtime/off_loop.py).

The same statements and the same replay and lost-reply rules as the threads' (enqueue.py,
enqueue_batch.py): one job without a key is one INSERT carrying its NOTIFY, alone (autocommit);
a replay after a lost reply looks for the job's id before it inserts again, and an INSERT that
meets the job it stored after all is that job, not an error; a keyed job answers the live job
holding its key; many jobs are one transaction, planned as on the threads, and a replay answers
what the lost attempt committed. Only queues this process knows have their row: creating one is
the threads' work (their first enqueue to a queue goes there).

A producer's loop (a web framework's) gives chokaq no moment to close its connections, so each
loop's transport registers an asynchronous generator with it: asyncio closes those as its loop
ends (``asyncio.run``, uvicorn), and the generator closes the connections then. What is left at
:meth:`LoopEnqueuer.close` (a loop closed without that step) is closed without the loop.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.exc import IntegrityError

from chokaq.domain.models import Enqueued, EnqueueRequest
from chokaq.storage.enqueue import due_in, new_job_id
from chokaq.storage.enqueue_batch import KEY_RACES, Attempts, announce_due, batch_keys, plan
from chokaq.storage.lookup import stored_ids_statement
from chokaq.storage.loop_transport import LoopSession, LoopTransport
from chokaq.storage.queues import QueueCache
from chokaq.storage.statements.enqueue import (
    enqueue_params,
    key_holder_statement,
    keyed_ids_statement,
    statement_for,
)
from chokaq.storage.transactions import Ambiguity, Transactions
from chokaq.storage.wakeups import Wakeups

Args = tuple[Sequence[Any], Mapping[str, Any]]


async def _stored(s: LoopSession, ids: Sequence[str]) -> bool:
    return bool(await s.run(stored_ids_statement(), {"stored_ids": list(ids)}))


async def _holder_of(s: LoopSession, key: str) -> str | None:
    rows = await s.run(key_holder_statement(), {"job_key": key})
    return str(rows[0][0]) if rows else None


async def _closer(transport: LoopTransport) -> AsyncGenerator[None, None]:
    """Started once on the transport's loop; asyncio closes it as the loop ends."""
    try:
        yield
    finally:
        await transport.close()


class LoopEnqueuer:
    """Enqueues on the calling event loop, one transport per loop (see the module docstring)."""

    def __init__(
        self,
        tx: Transactions,
        queue_cache: QueueCache,
        wakeups: Wakeups,
        args: Callable[[], Args | None],
        limit: int,
    ) -> None:
        self.tx = tx
        self.queue_cache = queue_cache
        self.wakeups = wakeups
        self._args = args  # how the engine connected; None where the loop may not connect so
        self._limit = max(1, limit)
        self._notify = tx.profile.notify_statement()  # None: no NOTIFY here
        # Per loop: its transport and the generator that closes it (held here: asyncio's own
        # reference to it is weak).
        self._transports: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[LoopTransport, AsyncGenerator[None, None]]
        ] = weakref.WeakKeyDictionary()

    def takes(self, reqs: Sequence[EnqueueRequest]) -> bool:
        """Whether these jobs can be stored on the running loop now: ``Storage.ProducerOnLoop`` is
        on, this database has a transport for it, the engine has connected (the transport connects
        as it did), and every job's queue is known to have its row."""
        if not self.tx.settings.producer_on_loop:
            return False
        return all(self.queue_cache.knows(r.queue) for r in reqs) and self._args() is not None

    async def _transport(self) -> LoopTransport:
        loop = asyncio.get_running_loop()
        found = self._transports.get(loop)
        if found is not None:
            return found[0]
        args = self._args()
        if args is None:
            raise RuntimeError("enqueue on the loop without a transport (ask takes() first)")
        transport = LoopTransport(self.tx, args, limit=self._limit)
        closer = _closer(transport)
        self._transports[loop] = (transport, closer)
        await closer.asend(None)
        return transport

    def close(self) -> None:
        """Close what the loops left open (their loops ended without closing asynchronous generators)."""
        for transport, _ in list(self._transports.values()):
            transport.abandon()
        self._transports.clear()

    # ------------------------------------------------------------------ one job
    async def enqueue(self, req: EnqueueRequest) -> tuple[str, bool]:
        """:meth:`Storage.enqueue` on the loop (no ``conn``: the loop's connections are its own)."""
        job_id = new_job_id()
        stmt = statement_for(req, notify=self._notify is not None)
        params = enqueue_params(job_id, req)
        key = req.idempotency_key

        async def work(s: LoopSession) -> tuple[str, bool]:
            if s.replaying and await _stored(s, [job_id]):
                # The first attempt committed and its reply was lost; the job may have run since.
                return job_id, True
            if key is not None:
                held = await _holder_of(s, key)
                if held is not None:
                    return held, held == job_id  # our own id: a lost attempt stored it
            try:
                await s.run(stmt, params)
            except IntegrityError:
                # The key taken meanwhile, or (a replay) the lost attempt, still running on the
                # server, stored this very job after the check above: either way no second job.
                held = await _holder_of(s, key) if key is not None else None
                if held is not None:
                    return held, held == job_id
                if not (s.replaying and await _stored(s, [job_id])):
                    raise
            return job_id, True

        result = await (await self._transport()).call(work, op="enqueue", seen=Ambiguity())
        self.wakeups.announce({req.queue: due_in(req)})
        return result

    # ------------------------------------------------------------------ many jobs
    async def enqueue_all(self, reqs: Sequence[EnqueueRequest]) -> list[Enqueued]:
        """:meth:`Storage.enqueue_all` on the loop: all or none, in one transaction."""
        if not reqs:
            return []
        ids = [new_job_id() for _ in reqs]
        seen = Attempts()

        async def work(s: LoopSession) -> list[Enqueued]:
            if s.replaying:
                seen.replayed = True
                if seen.created and await _stored(s, seen.created[:1]):
                    # The attempt whose reply was lost committed; its jobs may have run since.
                    assert seen.last is not None
                    return seen.last
            async with s.transaction():
                return await self._store(s, reqs, ids, seen)

        transport = await self._transport()
        keyed = bool(batch_keys(reqs))
        for race in range(1, KEY_RACES + 1):
            try:
                result = await transport.call(work, op="enqueue_many", seen=Ambiguity())
                break
            except IntegrityError:
                if seen.replayed and seen.created and await self._committed(transport, seen.created[0]):
                    # A lost attempt still running on the server committed after the replay's check.
                    assert seen.last is not None
                    result = seen.last
                    break
                if not keyed or race == KEY_RACES:
                    raise
        announce_due(self.wakeups, reqs)
        return result

    async def _committed(self, transport: LoopTransport, job_id: str) -> bool:
        async def look(s: LoopSession) -> bool:
            return await _stored(s, [job_id])

        return await transport.call(look, op="enqueue_many", seen=Ambiguity())

    async def _store(
        self, s: LoopSession, reqs: Sequence[EnqueueRequest], ids: list[str], seen: Attempts
    ) -> list[Enqueued]:
        keys = batch_keys(reqs)
        holder: dict[str, str] = {}
        if keys:
            holder = {str(k): str(i) for k, i in await s.run(keyed_ids_statement(), {"keys": keys})}
        out = plan(reqs, ids, holder)
        # Rows grouped by their statement's shape (the threads' one-job INSERT, without its NOTIFY):
        # psycopg pipelines each group's rows, so a group waits for one round trip, not one per row.
        groups: dict[Any, list[dict[str, Any]]] = {}
        for job, r in zip(out, reqs, strict=True):
            if job.created:
                groups.setdefault(statement_for(r, notify=False), []).append(enqueue_params(job.id, r))
        for stmt, rows in groups.items():
            await s.run_many(stmt, rows)
        if self._notify is not None:
            for q in sorted({r.queue for r in reqs}):
                await s.run(self._notify, {"queue": q})
        seen.last = out
        seen.created = [j.id for j in out if j.created]
        return out
