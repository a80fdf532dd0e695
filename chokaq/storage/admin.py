"""Operator actions: edit, resurrect, cancel, purge; each change audited in the same transaction that
makes it. The reads they build on are :class:`JobListing`'s (listing.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from sqlalchemy import Connection, Select, and_, delete, func, or_, select, update
from sqlalchemy.sql.elements import ColumnElement

from chokaq.domain import limits
from chokaq.domain.attempts import appended, final_failure, resurrected
from chokaq.domain.errors import ConflictError, JobValidationError, NotFoundError
from chokaq.domain.models import JobRecord, QueueInfo
from chokaq.domain.states import FailureReason, JobStatus, Location
from chokaq.domain.steps import ResurrectSteps
from chokaq.storage import event_feed
from chokaq.storage.admin_types import Actor, BulkResult, JobEdit, JobFilter, Page, parse_snapshot, snapshot_text
from chokaq.storage.cancel import cancel_jobs
from chokaq.storage.incidents import LEAVING, zombies_leaving
from chokaq.storage.listing import SORTS, TABLES, TIME_COLUMN, JobListing, contains
from chokaq.storage.moving import bump_stats, move_rows
from chokaq.storage.queues import UNSET, Override
from chokaq.storage.records import dlq_record, hot_record
from chokaq.storage.retention import purge_older
from chokaq.storage.schema import jobs_archive, jobs_dlq, jobs_hot
from chokaq.storage.sqlfuncs import row_lock, utcnow
from chokaq.storage.statements import FAILED, PENDING, status_is
from chokaq.storage.steps import delete_steps, journal_at_resurrect
from chokaq.storage.wakeups import notify

# Re-exported: the API, the CLI and the Functions import these from here.
__all__ = [
    "SORTS",
    "Actor",
    "AdminStore",
    "BulkResult",
    "JobEdit",
    "JobFilter",
    "Page",
    "contains",
    "parse_snapshot",
]

SAMPLE_IDS = 20

# A bulk action's move: the ids it moved (or deleted) among the DLQ rows ``where`` matches.
Mover = Callable[[Connection, ColumnElement[bool]], list[str]]


def _dlq_shape(reason: FailureReason, details: str | None, actor: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """What a job an operator moves gets on its way into the DLQ (see :func:`moving.move_rows`)."""

    def shape(r: dict[str, Any]) -> dict[str, Any]:
        return {"FailureReason": int(reason), "ErrorDetails": details, "LastModifiedBy": actor}

    return shape


class AdminStore(JobListing):
    """Operator actions over one Storage, and the reads of :class:`JobListing`."""

    # ------------------------------------------------------------------ audit
    @staticmethod
    def audit(
        conn: Connection, actor: Actor, action: str, job_ids: Sequence[str], details: dict[str, Any] | None = None
    ) -> None:
        """The action's AuditLog row and its event feed row (every process's Deck hears of it)."""
        event_feed.audit(conn, actor, action, job_ids, details)

    # ------------------------------------------------------------------ edits
    def edit_pending(self, job_id: str, edit: JobEdit, actor: Actor) -> JobRecord:
        """Change payload, tags or priority of a Pending job. Fetched/Processing jobs are owned by a
        worker and refused (ConflictError)."""
        if edit.is_empty():
            raise JobValidationError("nothing to change: give payload, tags or priority")

        def work(c: Connection) -> JobRecord:
            row = c.execute(row_lock(select(jobs_hot).where(jobs_hot.c.Id == job_id), jobs_hot)).first()
            if row is None:
                self._raise_missing(c, job_id, Location.HOT)
            before = hot_record(row)
            if before.status != JobStatus.PENDING:
                raise ConflictError(
                    f"job {job_id} is {before.status.name.capitalize() if before.status is not None else '?'}: "
                    "a worker owns it, so it cannot be edited"
                )
            values = self._edit_values(edit, actor)
            values["LastUpdatedUtc"] = utcnow()
            res = c.execute(
                update(jobs_hot).where(jobs_hot.c.Id == job_id, status_is(jobs_hot.c.Status, PENDING)).values(**values)
            )
            if res.rowcount != 1:
                raise ConflictError(f"job {job_id} was taken by a worker while it was being edited")
            self.audit(c, actor, "job.edit", [job_id], self._diff(before, edit))
            return hot_record(c.execute(select(jobs_hot).where(jobs_hot.c.Id == job_id)).one())

        return self.storage.write(work, op="edit_pending")

    def reschedule(self, job_id: str, at: datetime | None, actor: Actor) -> JobRecord:
        """Move a Pending job's due time to ``at`` (naive UTC), or to now (the database's clock)
        when None. One guarded UPDATE: a worker's claim and this race on the row, and exactly one
        wins; a job no longer Pending is refused (ConflictError)."""
        hot = jobs_hot.c

        def work(c: Connection) -> JobRecord:
            before = c.execute(select(hot.Status, hot.ScheduledAtUtc).where(hot.Id == job_id)).first()
            due = utcnow() if at is None else at
            res = c.execute(
                update(jobs_hot)
                .where(hot.Id == job_id, status_is(hot.Status, PENDING))
                .values(ScheduledAtUtc=due, LastUpdatedUtc=utcnow(), LastModifiedBy=actor.name)
            )
            if res.rowcount != 1:
                if before is None:
                    self._raise_missing(c, job_id, Location.HOT)
                raise ConflictError(f"job {job_id} is no longer Pending: a worker owns it, so it cannot be rescheduled")
            after = hot_record(c.execute(select(jobs_hot).where(hot.Id == job_id)).one())
            moved = {"before": before.ScheduledAtUtc if before else None, "after": after.scheduled_at_utc}
            self.audit(c, actor, "job.reschedule", [job_id], {"scheduled_at_utc": moved, "now": at is None})
            notify(c, after.queue)  # workers waiting for the old time look again
            return after

        rec = self.storage.write(work, op="reschedule_pending")
        wait = 0.0 if at is None else max(0.0, (at - datetime.now(UTC).replace(tzinfo=None)).total_seconds())
        self.storage.announce({rec.queue: wait})
        return rec

    def edit_dlq(self, job_id: str, edit: JobEdit, actor: Actor) -> JobRecord:
        if edit.priority is not None:
            raise JobValidationError("priority is set when resurrecting, not on a dead job")
        if edit.is_empty():
            raise JobValidationError("nothing to change: give payload or tags")

        def work(c: Connection) -> JobRecord:
            row = c.execute(row_lock(select(jobs_dlq).where(jobs_dlq.c.Id == job_id), jobs_dlq)).first()
            if row is None:
                self._raise_missing(c, job_id, Location.DLQ)
            before = dlq_record(row)
            c.execute(update(jobs_dlq).where(jobs_dlq.c.Id == job_id).values(**self._edit_values(edit, actor)))
            self.audit(c, actor, "dlq.edit", [job_id], self._diff(before, edit))
            return dlq_record(c.execute(select(jobs_dlq).where(jobs_dlq.c.Id == job_id)).one())

        return self.storage.write(work, op="edit_dlq")

    @staticmethod
    def _edit_values(edit: JobEdit, actor: Actor) -> dict[str, Any]:
        values: dict[str, Any] = {"LastModifiedBy": actor.name}
        if edit.payload is not None:
            values["Payload"] = edit.payload
        if edit.tags is not None:
            values["Tags"] = edit.tags
        if edit.priority is not None:
            values["Priority"] = edit.priority
        return values

    @staticmethod
    def _diff(before: JobRecord, edit: JobEdit) -> dict[str, Any]:
        changes: dict[str, Any] = {}
        if edit.payload is not None:
            changes["payload"] = {"before": before.payload, "after": edit.payload}
        if edit.tags is not None:
            changes["tags"] = {"before": before.tags, "after": edit.tags}
        if edit.priority is not None:
            changes["priority"] = {"before": before.priority, "after": edit.priority}
        if edit.force:
            changes["force"] = True
        return changes

    def _raise_missing(self, c: Connection, job_id: str, expected: Location) -> NoReturn:
        for loc, t in TABLES.items():
            if loc is not expected and c.execute(select(t.c.Id).where(t.c.Id == job_id)).first() is not None:
                raise ConflictError(f"job {job_id} is in {loc.value}, not {expected.value}")
        raise NotFoundError(f"no job {job_id!r} in {expected.value}")

    # ------------------------------------------------------------------ resurrect
    def _resurrect_rows(
        self, c: Connection, where: ColumnElement[bool], actor: Actor, edit: JobEdit | None = None
    ) -> list[dict[str, Any]]:
        now = datetime.now(UTC)

        def shape(r: dict[str, Any]) -> dict[str, Any]:
            return {
                "Attempts": _history_at_resurrect(r, actor.name, now),
                "Payload": edit.payload if edit and edit.payload is not None else r["Payload"],
                "Tags": edit.tags if edit and edit.tags is not None else r["Tags"],
                "Priority": edit.priority if edit and edit.priority is not None else limits.DEFAULT_PRIORITY,
                "IdempotencyKey": None,
                "Status": PENDING,
                "AttemptCount": 0,
                "WorkerId": None,
                "HeartbeatUtc": None,
                "StartedAtUtc": None,
                "LastModifiedBy": actor.name,
                "ZombieRetry": False,
            }

        rows = move_rows(c, jobs_dlq, where, jobs_hot, shape, {"ScheduledAtUtc": utcnow(), "LastUpdatedUtc": utcnow()})
        bump_stats(c, FAILED, Counter(r["Queue"] for r in rows), sign=-1)
        for q in {r["Queue"] for r in rows}:
            self.storage.queue_cache.ensure(c, q)
        return rows

    def resurrect(
        self,
        job_id: str,
        actor: Actor,
        edit: JobEdit | None = None,
        *,
        steps: ResurrectSteps | None = None,
        keep_steps: bool = False,
    ) -> JobRecord:
        """DLQ -> Pending in one move: attempts reset, idempotency key cleared, priority default 10.
        ``steps``: what becomes of its step journal (storage/steps.py), audited with the choice."""

        def work(c: Connection) -> JobRecord:
            before = c.execute(row_lock(select(jobs_dlq).where(jobs_dlq.c.Id == job_id), jobs_dlq)).first()
            if before is None:
                self._raise_missing(c, job_id, Location.DLQ)
            rows = self._resurrect_rows(c, jobs_dlq.c.Id == job_id, actor, edit)
            if not rows:
                raise ConflictError(f"job {job_id} left the DLQ while being resurrected")
            assert before is not None
            details: dict[str, Any] = {"failure_reason": FailureReason(before._mapping["FailureReason"]).label}
            if edit is not None:
                details.update(self._diff(dlq_record(before), edit))
            edited = edit is not None and edit.payload is not None
            details.update(journal_at_resurrect(c, [job_id], steps, edited=edited, keep_steps=keep_steps))
            details.update(zombies_leaving(rows))
            self.audit(c, actor, "dlq.resurrect", [job_id], details)
            notify(c, rows[0]["Queue"])
            return hot_record(c.execute(select(jobs_hot).where(jobs_hot.c.Id == job_id)).one())

        record = self.storage.write(work, op="resurrect")
        self.storage.announce()
        return record

    def _match_ids(
        self, c: Connection, f: JobFilter, max_jobs: int, location: Location, bound: tuple[datetime, str] | None = None
    ) -> tuple[int, list[str], str | None]:
        """The total matching now, the oldest ``max_jobs`` of them inside ``bound``, and the bound
        of the whole matching set (its newest job)."""
        t = TABLES[location]
        conds = self.where(location, f)
        total = c.execute(select(func.count()).select_from(t).where(*conds)).scalar_one()
        time_col = t.c[TIME_COLUMN[location]]
        inside = list(conds)
        if bound is not None:
            # The bound went through Python's microseconds; SQL Server keeps 100 ns. Rows within
            # the bound's microsecond are told apart by Id, so the newest previewed job stays in.
            exact, upper = self.storage.tx.profile.exact_time, bound[0] + timedelta(microseconds=1)
            inside.append(or_(time_col < exact(bound[0]), and_(time_col < exact(upper), t.c.Id <= bound[1])))
        q: Select[Any] = select(t.c.Id).where(*inside).order_by(time_col, t.c.Id).limit(max_jobs)
        newest = c.execute(
            select(time_col, t.c.Id).where(*conds).order_by(time_col.desc(), t.c.Id.desc()).limit(1)
        ).first()
        snap = snapshot_text(newest[0], newest[1]) if newest is not None and newest[0] is not None else None
        return int(total), [r[0] for r in c.execute(q).all()], snap

    @staticmethod
    def _bulk_scope(
        ids: Sequence[str] | None,
        f: JobFilter | None,
        max_jobs: int,
        dry_run: bool,
        expected_count: int | None,
        snapshot: str | None,
    ) -> tuple[list[str] | None, int, tuple[datetime, str] | None]:
        """Refuse a malformed bulk request; else ``(ids without repeats, max_jobs, preview bound)``."""
        if (ids is None) == (f is None):
            raise JobValidationError("give either ids or a filter")
        bound = parse_snapshot(snapshot) if snapshot is not None else None
        # A filter acts only on what a preview counted: the count confirmed and its bound.
        if f is not None and not dry_run and (expected_count is None or (expected_count > 0 and bound is None)):
            raise JobValidationError(
                "preview first (dry_run: true), then send its matched count as expected_count and its snapshot"
            )
        if ids is not None:
            if len(ids) > limits.MAX_BULK_IDS:
                raise JobValidationError(f"at most {limits.MAX_BULK_IDS} ids per request")
            # The cap applies to filters; ids are capped above.
            return list(dict.fromkeys(ids)), limits.MAX_BULK_IDS, bound
        if not 1 <= max_jobs <= limits.MAX_BULK_IDS:
            raise JobValidationError(f"max_jobs must be 1..{limits.MAX_BULK_IDS}")
        return None, max_jobs, bound

    def _bulk_chosen(
        self,
        c: Connection,
        ids: list[str] | None,
        f: JobFilter | None,
        max_jobs: int,
        bound: tuple[datetime, str] | None,
        confirmed: int | None,
    ) -> tuple[int, list[str], list[ColumnElement[bool]], str | None]:
        """``(matched, chosen ids, the filter's conditions, snapshot)`` for a bulk action on the DLQ.
        ``confirmed``: the count a preview showed, which the filter must not exceed now."""
        if f is None:
            assert ids is not None
            chosen = [r[0] for r in c.execute(select(jobs_dlq.c.Id).where(jobs_dlq.c.Id.in_(ids))).all()]
            return len(chosen), chosen, [], None
        matched, chosen, snap = self._match_ids(c, f, max_jobs, Location.DLQ, bound)
        if confirmed is not None and matched > confirmed:
            raise ConflictError(
                f"{matched} dead jobs match the filter now, but {confirmed} were "
                "previewed and confirmed: nothing was changed; preview again"
            )
        return matched, chosen, self.where(Location.DLQ, f), snap

    def _bulk(
        self,
        action: str,
        ids: Sequence[str] | None,
        f: JobFilter | None,
        max_jobs: int,
        actor: Actor,
        dry_run: bool,
        mover: Mover,
        expected_count: int | None = None,
        snapshot: str | None = None,
        more: dict[str, Any] | None = None,  # what the mover adds to the audit row
    ) -> BulkResult:
        unique, max_jobs, bound = self._bulk_scope(ids, f, max_jobs, dry_run, expected_count, snapshot)

        def work(c: Connection) -> BulkResult:
            confirmed = None if dry_run else expected_count
            matched, chosen, where_extra, snap = self._bulk_chosen(c, unique, f, max_jobs, bound, confirmed)
            if dry_run:
                return BulkResult(matched, 0, chosen[:SAMPLE_IDS], dry_run=True, snapshot=snap)
            if not chosen:
                return BulkResult(matched, 0, [], skipped_ids=list(unique or []))
            moved = mover(c, and_(jobs_dlq.c.Id.in_(chosen), *where_extra))
            moved_set = set(moved)
            details = (
                {"filter": f.as_json(), "expected_count": expected_count, "snapshot": snapshot}
                if f is not None
                else None
            )
            details = {**(details or {}), **more} if more else details
            self.audit(c, actor, action, moved, details)
            skipped = [i for i in (unique or chosen) if i not in moved_set]
            return BulkResult(matched, len(moved), moved[:SAMPLE_IDS], skipped_ids=skipped)

        result = self.storage.write(work, op=action)
        if result.affected and action == "dlq.resurrect":
            self.storage.announce()
        return result

    def resurrect_many(
        self,
        actor: Actor,
        *,
        ids: Sequence[str] | None = None,
        f: JobFilter | None = None,
        max_jobs: int = limits.DEFAULT_BULK_MAX_JOBS,
        dry_run: bool = False,
        expected_count: int | None = None,
        snapshot: str | None = None,
        steps: ResurrectSteps | None = None,
    ) -> BulkResult:
        more: dict[str, Any] = {}

        def mover(c: Connection, where: ColumnElement[bool]) -> list[str]:
            rows = self._resurrect_rows(c, where, actor)
            moved = [r["Id"] for r in rows]
            more.update(journal_at_resurrect(c, moved, steps, edited=False, keep_steps=False), **zombies_leaving(rows))
            return moved

        return self._bulk("dlq.resurrect", ids, f, max_jobs, actor, dry_run, mover, expected_count, snapshot, more)

    def purge_dlq(
        self,
        actor: Actor,
        *,
        ids: Sequence[str] | None = None,
        f: JobFilter | None = None,
        max_jobs: int = limits.DEFAULT_BULK_MAX_JOBS,
        dry_run: bool = False,
        expected_count: int | None = None,
        snapshot: str | None = None,
    ) -> BulkResult:
        more: dict[str, Any] = {}

        def mover(c: Connection, where: ColumnElement[bool]) -> list[str]:
            rows = [dict(r._mapping) for r in c.execute(delete(jobs_dlq).where(where).returning(*LEAVING)).all()]
            purged = [r["Id"] for r in rows]
            delete_steps(c, purged)  # the journal goes with its job
            more.update(zombies_leaving(rows))
            return purged

        return self._bulk("dlq.purge", ids, f, max_jobs, actor, dry_run, mover, expected_count, snapshot, more)

    # ------------------------------------------------------------------ cancel and retention
    def cancel(
        self, ids: Sequence[str], actor: Actor, *, running: bool = False, reason: str | None = None
    ) -> BulkResult:
        """Pending jobs -> DLQ as Cancelled; with ``running``, Fetched and Processing ones too (their
        workers stop them: see storage/cancel.py). Jobs not cancelled are skipped and listed."""
        return cancel_jobs(self.storage, self.audit, ids, actor, running=running, reason=reason)

    def purge_archive(
        self,
        older_than: datetime,
        actor: Actor,
        *,
        batch_size: int | None = None,
        progress: Callable[[int], object] | None = None,
    ) -> int:
        """Delete archived jobs finished before ``older_than`` in bounded transactions (Retention.ArchiveDays)."""
        return purge_older(
            self.storage,
            self.audit,
            table=jobs_archive,
            time_column=jobs_archive.c.FinishedAtUtc,
            action="archive.purge",
            op="purge_archive",
            older_than=older_than,
            actor=actor,
            batch_size=batch_size,
            progress=progress,
        )

    def purge_dlq_older(
        self,
        older_than: datetime,
        actor: Actor,
        *,
        batch_size: int | None = None,
        progress: Callable[[int], object] | None = None,
    ) -> int:
        """Delete dead jobs that failed before ``older_than`` in bounded transactions (Retention.DlqDays)."""
        return purge_older(
            self.storage,
            self.audit,
            table=jobs_dlq,
            time_column=jobs_dlq.c.FailedAtUtc,
            action="dlq.retention",
            op="purge_dlq_older",
            older_than=older_than,
            actor=actor,
            batch_size=batch_size,
            progress=progress,
        )

    def queue_changed(
        self,
        name: str,
        actor: Actor,
        changes: dict[str, Any],
        *,
        paused: bool | None = None,
        zombie_timeout_seconds: Override = UNSET,
        max_workers: Override = UNSET,
    ) -> QueueInfo:
        """Apply a queue change and its audit row in one transaction."""

        def work(c: Connection) -> QueueInfo:
            info = self.storage.update_queue(
                name, paused=paused, zombie_timeout_seconds=zombie_timeout_seconds, max_workers=max_workers, conn=c
            )
            self.audit(c, actor, "queue.update", [], {"queue": name, **changes})
            return info

        return self.storage.write(work, op="queue_update")


def _history_at_resurrect(row: dict[str, Any], by: str, at: datetime) -> str:
    """A DLQ row's attempt history as the resurrected job carries it: its last attempt (if the
    history lacks it) and the resurrect itself added."""
    final = final_failure(
        row["Attempts"],
        attempt=row["AttemptCount"],
        reason=FailureReason(row["FailureReason"]).label,
        worker=row["WorkerId"],
        started=row["StartedAtUtc"],
        failed_at=row["FailedAtUtc"],
        details=row["ErrorDetails"],
    )
    return appended(row["Attempts"], *(e for e in (final, resurrected(by, at)) if e is not None))
