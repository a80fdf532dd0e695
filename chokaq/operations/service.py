"""The operator's actions, one place for every surface.

The admin API, the CLI and the Functions timers parse their input, call :class:`Operations` and
shape its answer. Each action here applies the rules (:mod:`chokaq.operations.rules`), changes the
database through :class:`~chokaq.storage.admin.AdminStore` (which writes the audit row, naming
the actor, in the same transaction) and announces the change on the app's event bus.

Events are hints for dashboards to reload; the database is the truth. A process that nobody
subscribes to (a CLI command) builds its service with ``announce=False``: its changes reach the
Deck through the database, on the Deck's next ``stats.updated`` tick or reload.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypedDict

from chokaq.domain import limits
from chokaq.domain.breakers import BreakerState
from chokaq.domain.errors import JobValidationError, NotFoundError
from chokaq.domain.keys import check_key
from chokaq.domain.models import EnqueueRequest, JobRecord, QueueInfo
from chokaq.domain.schedules import ScheduleError, ScheduleInfo
from chokaq.domain.states import FailureReason, Location
from chokaq.domain.steps import ResurrectSteps
from chokaq.domain.when import check_ahead, utc_naive
from chokaq.operations.rules import check_zombie_timeout
from chokaq.runtime.app import ChokaQ
from chokaq.runtime.breakers import announce
from chokaq.runtime.events import EventKind
from chokaq.storage import Actor, AdminStore, BreakerStore, BulkResult, JobEdit, JobFilter, ScheduleStore


class QueueChanges(TypedDict, total=False):
    """A queue change: an absent key is unchanged; ``None`` clears that override."""

    paused: bool
    zombie_timeout_seconds: int | None
    max_workers: int | None


@dataclass(frozen=True)
class Selection:
    """The dead jobs a bulk action touches: ``ids``, or a filter ``f`` with its cap. A filter action
    is bound to its preview (``dry_run=True``): it sends the preview's ``matched`` count back as
    ``expected_count`` and its ``snapshot`` (see ``AdminStore.resurrect_many``)."""

    ids: Sequence[str] | None = None
    f: JobFilter | None = None
    max_jobs: int = limits.DEFAULT_BULK_MAX_JOBS
    dry_run: bool = False
    expected_count: int | None = None
    snapshot: str | None = None


class _BulkAction(Protocol):
    """``AdminStore.resurrect_many`` and ``AdminStore.purge_dlq``."""

    def __call__(
        self,
        actor: Actor,
        *,
        ids: Sequence[str] | None,
        f: JobFilter | None,
        max_jobs: int,
        dry_run: bool,
        expected_count: int | None,
        snapshot: str | None,
    ) -> BulkResult: ...


class Operations:
    """Operator actions over one app: its storage, its handlers' settings and its event bus."""

    def __init__(self, app: ChokaQ, store: AdminStore | None = None, *, announce: bool = True) -> None:
        self.app = app
        self.store = store if store is not None else AdminStore(app.storage)
        self.announce = announce

    def _publish(self, kind: EventKind, actor: str | None, **data: Any) -> None:
        if self.announce:
            self.app.bus.publish(kind, actor=actor, **data)

    # ------------------------------------------------------------------ lookups the actions need
    def job(self, job_id: str) -> JobRecord:
        """The job wherever it is (hot, archive or DLQ)."""
        rec = self.app.storage.get_job(job_id)
        if rec is None:
            raise NotFoundError(f"no job {job_id!r}")
        return rec

    def dead_job(self, job_id: str) -> JobRecord:
        """The job, which must be in the DLQ."""
        rec = self.job(job_id)
        if rec.location is not Location.DLQ:
            raise NotFoundError(f"job {job_id} is not in the DLQ (it is in {rec.location.value})")
        return rec

    # ------------------------------------------------------------------ hot jobs
    def enqueue(self, req: EnqueueRequest) -> tuple[str, bool]:
        """Store a prepared job (``app.prepare``) as ``req.created_by``; ``(id, created)``."""
        job_id, created = self.app.submit(req)
        if created:
            self._publish(
                "job.updated",
                req.created_by,
                id=job_id,
                queue=req.queue,
                type=req.type,
                status="Pending",
                action="enqueued",
            )
        return job_id, created

    def edit_pending(self, actor: Actor, job_id: str, edit: JobEdit) -> JobRecord:
        out = self.store.edit_pending(job_id, edit, actor)
        self._publish("job.updated", actor.name, id=job_id, queue=out.queue, status="Pending", action="edited")
        return out

    def reschedule(self, actor: Actor, job_id: str, at: datetime | None) -> JobRecord:
        """A Pending job due at ``at`` (timezone-aware) instead, or now when None; ConflictError
        once a worker owns it."""
        due = None if at is None else utc_naive(at)
        if due is not None:
            check_ahead(due, datetime.now(UTC).replace(tzinfo=None))
        out = self.store.reschedule(job_id, due, actor)
        self._publish("job.updated", actor.name, id=job_id, queue=out.queue, status="Pending", action="rescheduled")
        return out

    def cancel(
        self, actor: Actor, ids: Sequence[str], *, running: bool = False, reason: str | None = None
    ) -> BulkResult:
        """Pending jobs to the DLQ as Cancelled, with who and why. Jobs a worker holds (Fetched,
        Processing) are skipped, unless ``running``: then they go too, in the same transaction, and
        their workers stop the handlers (at once on PostgreSQL, else at their next heartbeat)."""
        res = self.store.cancel(ids, actor, running=running, reason=reason)
        if res.affected:
            self._publish(
                "job.failed",
                actor.name,
                ids=res.sample_ids,
                count=res.affected,
                reason=FailureReason.CANCELLED.label,
                was_running=res.was_running[:20],
            )
        return res

    # ------------------------------------------------------------------ the DLQ
    def edit_dead(self, actor: Actor, job_id: str, edit: JobEdit) -> JobRecord:
        out = self.store.edit_dlq(job_id, edit, actor)
        self._publish("job.updated", actor.name, id=job_id, queue=out.queue, location="dlq", action="edited")
        return out

    def resurrect(
        self,
        actor: Actor,
        job_id: str,
        edit: JobEdit | None = None,
        *,
        steps: ResurrectSteps | None = None,
        keep_steps: bool = False,
    ) -> JobRecord:
        """One job back to Pending, with the edit (if it changes anything) in the same move, and
        its step journal resumed or cleared (``steps``; a payload edit clears it unless ``keep_steps``)."""
        wanted = None if edit is None or (edit.is_empty() and not edit.force) else edit
        out = self.store.resurrect(job_id, actor, wanted, steps=steps, keep_steps=keep_steps)
        self._publish("job.resurrected", actor.name, id=job_id, queue=out.queue, ids=[job_id], count=1)
        return out

    def resurrect_many(self, actor: Actor, selection: Selection, steps: ResurrectSteps | None = None) -> BulkResult:
        """Dead jobs back to Pending, by ids or by a filter bound to its preview; their step journals
        resumed (the default) or cleared (``steps="scratch"``)."""
        res = self._bulk(functools.partial(self.store.resurrect_many, steps=steps), actor, selection)
        if res.affected:
            self._publish("job.resurrected", actor.name, ids=res.sample_ids, count=res.affected)
        return res

    def purge_dlq(self, actor: Actor, selection: Selection) -> BulkResult:
        """Delete dead jobs for good, selected as for :meth:`resurrect_many`."""
        res = self._bulk(self.store.purge_dlq, actor, selection)
        if res.affected:
            self._publish("job.purged", actor.name, location="dlq", ids=res.sample_ids, count=res.affected)
        return res

    @staticmethod
    def _bulk(action: _BulkAction, actor: Actor, sel: Selection) -> BulkResult:
        return action(
            actor,
            ids=sel.ids,
            f=sel.f,
            max_jobs=sel.max_jobs,
            dry_run=sel.dry_run,
            expected_count=sel.expected_count,
            snapshot=sel.snapshot,
        )

    # ------------------------------------------------------------------ the archive
    def purge_archive(self, actor: Actor, older_than: datetime, progress: Callable[[int], object] | None = None) -> int:
        """Delete archived jobs finished before ``older_than`` (naive UTC), in bounded batches."""
        deleted = self.store.purge_archive(older_than, actor, progress=progress)
        if deleted:
            self._publish(
                "job.purged", actor.name, location="archive", count=deleted, older_than=older_than.isoformat()
            )
        return deleted

    def purge_dlq_older(
        self, actor: Actor, older_than: datetime, progress: Callable[[int], object] | None = None
    ) -> int:
        """Delete dead jobs that failed before ``older_than`` (naive UTC), in bounded batches."""
        deleted = self.store.purge_dlq_older(older_than, actor, progress=progress)
        if deleted:
            self._publish("job.purged", actor.name, location="dlq", count=deleted, older_than=older_than.isoformat())
        return deleted

    # ------------------------------------------------------------------ queues
    def change_queue(self, actor: Actor, name: str, changes: QueueChanges, *, create: bool = False) -> QueueInfo:
        """Pause, limits, zombie timeout. A queue that does not exist is created only with ``create``:
        a typo must not create a queue (and its audit trail) that no worker serves."""
        timeout = changes.get("zombie_timeout_seconds")
        if timeout is not None:
            check_zombie_timeout("zombie_timeout_seconds", timeout, self.app.settings.execution.heartbeat_interval_max)
        if not changes:
            raise JobValidationError("nothing to change: give paused, zombie_timeout_seconds or max_workers")
        check_key("queue", name)  # a malformed name is refused with its reason, before "no such queue"
        if not create and all(q.name != name for q in self.app.storage.list_queues()):
            raise NotFoundError(f'no queue {name!r}; send "create": true to create it')
        info: QueueInfo = self.store.queue_changed(name, actor, dict(changes), **changes)
        self._publish("queue.changed", actor.name, queue=name, **changes)
        return info

    # ------------------------------------------------------------------ circuit breakers
    def list_breakers(self) -> list[BreakerState]:
        """Every job type's breaker that has counted a failure (closed ones included)."""
        return BreakerStore(self.app.storage).every()

    def close_breaker(self, actor: Actor, job_type: str) -> BreakerState:
        """Close a type's breaker now: its jobs are claimed again (operator; audited). A closed
        one stays as it is."""
        state, change = BreakerStore(self.app.storage).close(job_type, actor)
        announce(self.app.bus if self.announce else None, change)
        return state

    # ------------------------------------------------------------------ schedules
    @property
    def schedules(self) -> ScheduleStore:
        return ScheduleStore(self.app.storage)

    def list_schedules(self) -> list[ScheduleInfo]:
        return self.schedules.list()

    def pause_schedule(self, actor: Actor, name: str, paused: bool) -> ScheduleInfo:
        """Pause a schedule, or resume it from its next slot after now (operator; audited)."""
        check_key("schedule", name)
        return self.schedules.set_paused(name, paused, actor)

    def run_schedule(self, actor: Actor, name: str) -> str:
        """Enqueue one job of the schedule now; its slots do not move (operator; audited)."""
        check_key("schedule", name)
        info = self.schedules.get(name)
        job_id = self.schedules.run_now(name, actor)
        self._publish(
            "job.updated",
            actor.name,
            id=job_id,
            queue=info.queue,
            type=info.job_type,
            status="Pending",
            action="enqueued",
        )
        return job_id

    def edit_schedule(self, actor: Actor, name: str, *, cron: str | None, tz: str | None) -> ScheduleInfo:
        """Change the cron expression or time zone (admin; audited). Code writes its own definition
        again at the next start-up: it stays the source of truth."""
        check_key("schedule", name)
        if cron is None and tz is None:
            raise JobValidationError("nothing to change: give cron or time_zone")
        try:
            return self.schedules.edit(name, actor, cron=cron, tz=tz)
        except ScheduleError as exc:  # a bad expression or zone: the caller's input, nothing stored
            raise JobValidationError(str(exc)) from None
