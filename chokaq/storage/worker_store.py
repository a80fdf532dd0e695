"""One worker's way to the database: :meth:`Storage.for_worker` gives it a :class:`WorkerStore`.

It owns the worker's connections and threads: the database threads every blocking call runs on,
and, on PostgreSQL, the transport that runs claims and completions on the worker's event loop
(:mod:`.loop_transport`), opened by :meth:`WorkerStore.on_loop` once the database has answered and
closed as the worker stops. Each call below chooses its way itself: the loop where the transport can
take it, else a database thread, with the same statements and lost-reply handling either way.

Claims and starts take jobs, and their reply may be lost: :meth:`WorkerStore.claim` and
:meth:`WorkerStore.start` return a :data:`Take`, run by the worker's reconciler, which hands it
the callback ``unheard`` to call when the take may have committed without the worker hearing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from chokaq.domain.models import JobRecord, Lease
from chokaq.domain.states import FailureReason
from chokaq.storage.cancel import cancelled_runs, note_stopped
from chokaq.storage.job_notes import Notes
from chokaq.storage.transactions import Ambiguity

log = logging.getLogger("chokaq.worker")

if TYPE_CHECKING:
    from chokaq.storage.dead_letters import DeadLetter
    from chokaq.storage.loop_transport import LoopTransport
    from chokaq.storage.store import Completion, StartResult, Storage

P = ParamSpec("P")
T = TypeVar("T")

# A claim or a start, decided and ready to send: awaited with ``unheard``, called (on the loop or
# on a database thread) when it may have committed behind a lost reply.
Take = Callable[[Callable[[], None]], Awaitable[T]]


class WorkerStore:
    """The database calls of the worker ``worker_id``, each awaited on its event loop."""

    def __init__(self, storage: Storage, worker_id: str) -> None:
        self.storage = storage
        self.worker_id = worker_id
        # Enough threads that a heartbeat or an outcome never queues behind fetches and starts
        # stuck on a hung connection (until its timeout ends it).
        self._threads = ThreadPoolExecutor(max_workers=6, thread_name_prefix="chokaq-db")
        self._loop: LoopTransport | None = None

    async def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a blocking call on the worker's database threads."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, functools.partial(fn, *args, **kwargs))

    def skip_open_breakers(self) -> None:
        """Every claim of this storage leaves out the job types whose circuit breaker is not
        closed (a worker with breakers on; see storage/breakers.py). Until this is called the
        claim is the one it always was."""
        self.storage._claimer.breaker = True

    def close(self) -> None:
        """Let the database threads go (a call in flight ends on its own)."""
        self._threads.shutdown(wait=False)

    @contextlib.asynccontextmanager
    async def on_loop(self) -> AsyncIterator[None]:
        """Claims and completions on the running event loop, where the storage has a transport for it
        (see :meth:`Storage.loop_transport`), for the duration of the block. Entered after the
        start-up ping, which has connected the engine (the transport connects as it did); closed once
        the outcomes are written."""
        self._loop = self.storage.loop_transport()
        try:
            yield
        finally:
            transport, self._loop = self._loop, None
            if transport is not None:
                await transport.close()

    # ------------------------------------------------------------------ takes
    def claim(
        self,
        want: int,
        queues: Sequence[str] | None,
        *,
        start: bool,
        zombie_retry_types: Collection[str],
        skip: Collection[str],
    ) -> Take[list[JobRecord]]:
        """A claim of up to ``want`` jobs (see :meth:`Storage.fetch`), on the loop where the storage
        can claim there now (:meth:`Storage.fetches_on_loop`), else on a database thread."""
        transport = self._loop
        if transport is not None and self.storage.fetches_on_loop(queues):
            fetch_on_loop = self.storage.fetch_on_loop

            async def on_loop(unheard: Callable[[], None]) -> list[JobRecord]:
                seen = Ambiguity()
                try:
                    return await fetch_on_loop(
                        transport,
                        self.worker_id,
                        want,
                        queues,
                        seen=seen,
                        start=start,
                        zombie_retry_types=zombie_retry_types,
                        skip=skip,
                    )
                finally:
                    if seen.ambiguous:
                        unheard()

            return on_loop
        fetch = functools.partial(
            self.storage.fetch,
            self.worker_id,
            want,
            queues,
            start=start,
            zombie_retry_types=zombie_retry_types,
            skip=skip,
        )
        return self._on_thread(fetch)

    def start(self, jobs: Sequence[JobRecord], zombie_retry_types: Collection[str]) -> Take[StartResult]:
        """Fetched -> Processing for ``jobs`` (see :meth:`Storage.start`), on a database thread."""
        return self._on_thread(functools.partial(self.storage.start, self.worker_id, jobs, zombie_retry_types))

    def _on_thread(self, fn: Callable[[], T]) -> Take[T]:
        ambiguity = self.storage.ambiguity

        def tracked(unheard: Callable[[], None]) -> T:
            try:
                with ambiguity() as seen:
                    return fn()
            finally:
                # In the thread: a call whose waiter was cancelled still reports what it left.
                if seen.ambiguous:
                    unheard()

        async def on_thread(unheard: Callable[[], None]) -> T:
            return await self.call(tracked, unheard)

        return on_thread

    # ------------------------------------------------------------------ while running
    async def heartbeat(self, leases: Sequence[Lease], notes: Mapping[str, Notes] | None = None) -> set[str]:
        """Refresh the leases (and write the jobs' new ``notes``); the ids still ours
        (:meth:`Storage.heartbeat`)."""
        return await self.call(self.storage.heartbeat, self.worker_id, leases, notes)

    async def cancelled_runs(self, leases: Sequence[Lease]) -> set[str]:
        """The ids among ``leases`` (runs this worker lost) an operator cancelled (storage/cancel.py)."""
        return await self.call(cancelled_runs, self.storage, self.worker_id, leases)

    def note_stopped(self, lease: Lease, note: str) -> None:
        """Add ``note`` to a cancelled run's DLQ row, on a database thread, without waiting: called
        from wherever its handler ended (a plain function's own thread). Best effort: logged on failure."""

        def write() -> None:
            try:
                note_stopped(self.storage, lease, note)
            except Exception as exc:
                log.warning("could not note when cancelled job %s stopped: %s", lease.job_id, exc)

        try:
            self._threads.submit(write)
        except RuntimeError:  # the worker has stopped: its threads are gone
            log.info("cancelled job %s stopped after its worker: not noted", lease.job_id)

    # ------------------------------------------------------------------ finishing
    async def complete(self, done: Sequence[Completion]) -> set[str]:
        """Successes archived, as :meth:`Storage.complete`: on the loop where the worker has a
        transport there (the ids it did not move are then looked up on a database thread: a replay after a
        lost reply finds its own earlier success gone from JobsHot)."""
        transport = self._loop
        if transport is None:
            return await self.call(self.storage.complete, self.worker_id, done)
        moved, missing = await self.storage.complete_on_loop(transport, self.worker_id, done)
        if missing:
            moved |= await self.call(self.storage.archived_already, missing)
        return moved

    async def fail(
        self, lease: Lease, reason: FailureReason, details: str | None, attempts: str, notes: Notes | None = None
    ) -> bool:
        return await self.call(self.storage.fail, lease, reason, details, attempts, notes)

    async def fail_many(self, fails: Sequence[DeadLetter]) -> set[str]:
        """A batch of failures in one transaction (:meth:`Storage.fail_many`)."""
        return await self.call(self.storage.fail_many, fails)

    async def retry(self, lease: Lease, delay: float, attempts: str, notes: Notes | None = None) -> bool:
        return await self.call(self.storage.retry, lease, delay, attempts, notes)

    async def reschedule(self, leases: Sequence[Lease]) -> list[str]:
        return await self.call(self.storage.reschedule, self.worker_id, leases)

    async def release(self, leases: Sequence[Lease]) -> list[str]:
        return await self.call(self.storage.release, self.worker_id, leases)

    # ------------------------------------------------------------------ reads
    async def owned(self, since: datetime | None) -> list[JobRecord]:
        """Fetched and Processing rows under this worker's id (:meth:`Storage.owned`)."""
        return await self.call(self.storage.owned, self.worker_id, since)

    async def refresh_statistics(self) -> bool:
        """:meth:`Storage.refresh_statistics` on a database thread."""
        return await self.call(self.storage.refresh_statistics)

    async def ping(self) -> datetime:
        """A round trip; the database's UTC clock."""
        return await self.call(self.storage.ping)
