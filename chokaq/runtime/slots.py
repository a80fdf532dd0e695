"""A worker's slots and prefetch buffer: how many jobs it holds, in which stage, and how many more
it may claim or start. The fetch and start loops ask it what to do next and wait on it.

Stages of a job held here: claimed by a fetch in flight (counted only), buffered (Fetched, waiting
for a slot), being started (a start batch in flight), running (started and not yet finalised;
``executing`` while its handler still runs). A handler frees its slot when it returns, before its
outcome is written, so that outcomes can be written in batches. Jobs started and not yet written
back (running or finished) are bounded by 2 x Concurrency: at that many, no handler starts until
some outcomes are written. A job that finished but whose outcome a crash lost is Processing in the
database, and the sweep makes it a Zombie like one that was cut off mid-way; the bound keeps one
crash to at most 2 x Concurrency Processing rows, however long the database held the writes back.

Waiters listen to what can satisfy them: ``slot`` (a slot may be free), ``jobs`` (jobs were
buffered) and ``room`` (the buffer has room, a claim ended, or a backlog showed: fetchers look
again). Stopping notifies all three, and ``stopped``, which wakes a :meth:`Slots.sleep`."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterable, Iterator

from chokaq.domain.models import JobRecord, Lease
from chokaq.runtime.changes import Changes
from chokaq.runtime.running import Running


class Slots:
    def __init__(self, *, concurrency: int, prefetch: int, batch: int) -> None:
        self.slot = Changes()
        self.jobs = Changes()
        self.room = Changes()
        self.stopped = Changes()
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.batch = batch
        self.max_held = 2 * concurrency  # started and not yet written back: running + finished
        # Refill the buffer when less than one round of work is left (and fewer jobs are queued
        # than handlers run: see claim_size), so a worker does not sit on up to
        # Execution.Prefetch reserved jobs while other workers idle.
        self.lookahead = min(prefetch, max(batch, concurrency))
        self.buffer: deque[JobRecord] = deque()
        self.running: dict[str, Running] = {}
        self.executing: set[str] = set()
        self.in_start: set[str] = set()  # held by a start in flight: neither buffered nor running
        # Jobs whose start may have committed without the worker hearing it (a start in flight, or
        # one that failed and went back to the buffer), with the attempt it gives them: their
        # leases are heartbeated until a start call for them returns. See unsure_leases.
        self.unsure: dict[str, int] = {}
        self._claiming = 0  # jobs asked for by claims into the buffer in flight
        self._starting = 0  # slots held by start batches and claims for idle slots in flight
        self.backlog = False  # the last claim came back full
        self.stopping = False

    # ------------------------------------------------------------------ accounting
    def free(self) -> int:
        """Slots neither running a handler nor held by a start in flight."""
        free = min(self.concurrency - len(self.executing), self.max_held - len(self.running))
        return free - self._starting

    def idle(self) -> int:
        """Free slots that no buffered job will fill: jobs claimed for them can start at once."""
        return self.free() - len(self.buffer)

    @property
    def busy(self) -> bool:
        """Holding any job: buffered, being started, running, or with its outcome not yet recorded."""
        return bool(self.running or self.buffer or self.in_start)

    def held(self) -> set[str]:
        return set(self.running) | {j.id for j in self.buffer} | self.in_start

    def claim_size(self, *, primary: bool) -> tuple[int, bool] | None:
        """What a fetcher should claim now: (how many, straight into Processing), or None.

        Idle slots and nothing buffered for them: claim straight into Processing and start (one
        write per job fewer). Otherwise the primary fetcher refills the buffer, a fetch batch at a
        time, while fewer jobs are queued for it than the lookahead and than handlers run.
        The second fetcher only claims for idle slots while there is a backlog. Once stopping,
        nothing: a stop and a change that allows a claim can land in the same loop turn."""
        if self.stopping:
            return None
        idle = self.idle()
        if idle > 0 and (primary or self.backlog):
            return min(self.batch, idle), True
        if not primary:
            return None
        if self.max_held - len(self.running) < self.concurrency - len(self.executing):
            # The slots are held by outcomes not yet written, not by running handlers: they come
            # free when the completer's write returns. A job buffered for them would wait as long
            # and cost a second write (Fetched, then its start); claim for them once they are idle.
            return None
        queued = len(self.buffer) + self._claiming
        want = min(self.batch, self.prefetch - queued)
        # The buffer is for the slots that running handlers will free, so it is refilled only
        # while fewer jobs are queued than handlers run (and than the lookahead). Slots held by
        # claims in flight are filled by those claims; a job buffered for one costs a second write
        # (Fetched, then its start) while other workers could run it.
        # A launch raises the count without a notify of its own: each follows the end of a claim
        # or a start, which notifies, and waiters re-check only once the launching task yields.
        if queued >= min(self.lookahead, len(self.executing)) or want <= 0:
            return None
        return want, False

    # ------------------------------------------------------------------ changes
    def stop(self) -> None:
        self.stopping = True
        for changes in (self.slot, self.jobs, self.room, self.stopped):
            changes.notify()

    async def sleep(self, seconds: float) -> None:
        """Sleep, but wake for a stop (a backoff wait)."""
        if self.stopping:
            await asyncio.sleep(0)
            return
        await self.stopped.until(lambda: self.stopping, timeout=seconds)

    @contextlib.contextmanager
    def claiming(self, want: int, *, start: bool) -> Iterator[None]:
        """Hold ``want`` slots (``start``) or buffer places for a claim in flight."""
        if start:
            self._starting += want
        else:
            self._claiming += want
        try:
            yield
        finally:
            # What the claim held but did not fill is free again: a starter or the other fetcher
            # may be waiting on it.
            if start:
                self._starting -= want
                self.slot.notify()
            else:
                self._claiming -= want
            self.room.notify()

    def claimed(self, got: int, want: int) -> None:
        self.backlog = got == want
        if self.backlog:
            self.room.notify()  # the second fetcher waits for one

    def add_buffered(self, jobs: Iterable[JobRecord]) -> None:
        self.buffer.extend(jobs)
        self.jobs.notify()

    def take_buffer(self) -> list[JobRecord]:
        pending = list(self.buffer)
        self.buffer.clear()
        self.room.notify()
        return pending

    async def jobs_to_start(self) -> list[JobRecord]:
        """Wait for a free slot and a buffered job, then take as many as there are slots for;
        [] once stopping. The caller ends the start with :meth:`start_ended`."""
        while not self.stopping:
            if not self.buffer:
                await self.jobs.changed()
            elif self.free() <= 0:
                await self.slot.changed()
            else:
                batch = [self.buffer.popleft() for _ in range(min(self.free(), len(self.buffer)))]
                self._starting += len(batch)
                self.in_start.update(j.id for j in batch)
                self.room.notify()
                return batch
        return []

    def starting(self, batch: list[JobRecord]) -> None:
        """A start of ``batch`` is about to be sent: from now on it may commit unheard."""
        for j in batch:
            self.unsure[j.id] = j.attempt_count + 1

    def start_settled(self, batch: list[JobRecord]) -> None:
        """A start call for ``batch`` returned: each job is running, released or lost."""
        for j in batch:
            self.unsure.pop(j.id, None)

    def unsure_leases(self, worker_id: str) -> list[Lease]:
        """Leases of the jobs whose start may have committed unheard, at the attempt it gave them.

        Such a start is recognised only when a later start of the same jobs gets through, which
        may take longer than the zombie timeout while the database is away; meanwhile nobody
        would renew the lease the lost start stamped, and the sweep would bury jobs that never
        ran. Heartbeating these is harmless when the start did not commit: the heartbeat is
        fenced on Processing at that attempt, so it matches no Fetched row."""
        # A job running here has its own lease in the beat; listing it twice at two attempts
        # could drop one (SQL Server's fence keeps one attempt per id).
        running = self.running
        return [Lease(job_id, worker_id, attempt) for job_id, attempt in self.unsure.items() if job_id not in running]

    def requeue(self, batch: list[JobRecord]) -> None:
        """A start that failed: its jobs go back to the front of the buffer."""
        self.buffer.extendleft(reversed(batch))
        self.jobs.notify()

    def start_ended(self, batch: list[JobRecord]) -> None:
        self.in_start.difference_update(j.id for j in batch)
        self._starting -= len(batch)
        self.slot.notify()  # the other starter may have been waiting on these slots

    def launched(self, run: Running) -> None:
        self.running[run.record.id] = run
        self.executing.add(run.record.id)

    def handler_ended(self, job_id: str) -> None:
        self.executing.discard(job_id)
        self.slot.notify()

    def finished(self, job_ids: Iterable[str]) -> None:
        """Outcomes recorded (or left to the sweep): the jobs are no longer held."""
        for job_id in job_ids:
            self.running.pop(job_id, None)
        self.slot.notify()
