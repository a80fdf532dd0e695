"""Operator actions: list, inspect, edit, resurrect, cancel, purge; each change audited in the same
transaction that makes it."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NoReturn

from sqlalchemy import Connection, Select, Table, and_, delete, func, insert, or_, select, update
from sqlalchemy.sql.elements import ColumnElement

from chokaq.domain import limits
from chokaq.domain.errors import ConflictError, JobValidationError, NotFoundError
from chokaq.domain.models import JobRecord, QueueInfo
from chokaq.domain.states import FailureReason, JobStatus, Location
from chokaq.storage.queues import UNSET, Override
from chokaq.storage.records import archive_record, dlq_record, hot_record
from chokaq.storage.schema import audit_log, jobs_archive, jobs_dlq, jobs_hot
from chokaq.storage.sqlfuncs import row_lock, seconds, utc_offset, utcnow
from chokaq.storage.statements import FAILED, PENDING, status_is
from chokaq.storage.store import Storage

# Sort keys a client may name, per table. Anything else is refused before SQL is built.
SORTS: dict[Location, dict[str, str]] = {
    Location.HOT: {
        "created": "CreatedAtUtc",
        "scheduled": "ScheduledAtUtc",
        "priority": "Priority",
        "queue": "Queue",
        "type": "Type",
        "status": "Status",
        "attempts": "AttemptCount",
        "updated": "LastUpdatedUtc",
        "id": "Id",
    },
    Location.ARCHIVE: {
        "finished": "FinishedAtUtc",
        "created": "CreatedAtUtc",
        "queue": "Queue",
        "type": "Type",
        "duration": "DurationMs",
        "attempts": "AttemptCount",
        "id": "Id",
    },
    Location.DLQ: {
        "failed": "FailedAtUtc",
        "created": "CreatedAtUtc",
        "queue": "Queue",
        "type": "Type",
        "reason": "FailureReason",
        "attempts": "AttemptCount",
        "id": "Id",
    },
}
DEFAULT_SORT = {Location.HOT: "created", Location.ARCHIVE: "finished", Location.DLQ: "failed"}
TIME_COLUMN = {Location.HOT: "CreatedAtUtc", Location.ARCHIVE: "FinishedAtUtc", Location.DLQ: "FailedAtUtc"}
TABLES: dict[Location, Table] = {Location.HOT: jobs_hot, Location.ARCHIVE: jobs_archive, Location.DLQ: jobs_dlq}
MAPPERS = {Location.HOT: hot_record, Location.ARCHIVE: archive_record, Location.DLQ: dlq_record}
SAMPLE_IDS = 20

# A bulk action's move: the ids it moved (or deleted) among the DLQ rows ``where`` matches.
Mover = Callable[[Connection, ColumnElement[bool]], list[str]]


def _dlq_shape(reason: FailureReason, details: str | None, actor: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """What a job an operator moves gets on its way into the DLQ (see :meth:`Storage.move_rows`)."""

    def shape(r: dict[str, Any]) -> dict[str, Any]:
        return {"FailureReason": int(reason), "ErrorDetails": details, "LastModifiedBy": actor}

    return shape


@dataclass(frozen=True)
class JobFilter:
    queue: str | None = None
    type: str | None = None
    status: JobStatus | None = None
    failure_reason: FailureReason | None = None
    tag: str | None = None
    from_utc: datetime | None = None
    to_utc: datetime | None = None
    search: str | None = None


@dataclass(frozen=True)
class Actor:
    name: str
    role: str

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > limits.MAX_ACTOR_LEN:
            raise JobValidationError(f"actor name must be 1..{limits.MAX_ACTOR_LEN} characters")


@dataclass
class Page:
    items: list[JobRecord]
    total: int
    page: int
    page_size: int


@dataclass
class BulkResult:
    matched: int
    affected: int
    sample_ids: list[str] = field(default_factory=list)
    dry_run: bool = False
    skipped_ids: list[str] = field(default_factory=list)
    # A filter preview's bound: the newest matching job as "<FailedAtUtc ISO>|<Id>". The action
    # that follows acts only on jobs at or before it, so jobs dead-lettered after the preview
    # are never touched by a confirmation that did not count them.
    snapshot: str | None = None


def _snapshot_text(failed_at: datetime, job_id: str) -> str:
    return f"{failed_at.isoformat()}|{job_id}"


def parse_snapshot(text: str) -> tuple[datetime, str]:
    when, sep, job_id = text.partition("|")
    try:
        if not sep or not job_id or len(job_id) > limits.MAX_JOB_ID_LEN:
            raise ValueError
        return datetime.fromisoformat(when), job_id
    except ValueError:
        raise JobValidationError("snapshot is not one a preview returned (dry_run: true gives one)") from None


@dataclass(frozen=True)
class JobEdit:
    payload: str | None = None
    tags: str | None = None
    priority: int | None = None
    force: bool = False

    def is_empty(self) -> bool:
        return self.payload is None and self.tags is None and self.priority is None


class AdminStore:
    def __init__(self, storage: Storage) -> None:
        self.s = storage

    # ------------------------------------------------------------------ audit
    @staticmethod
    def audit(
        conn: Connection, actor: Actor, action: str, job_ids: Sequence[str], details: dict[str, Any] | None = None
    ) -> None:
        conn.execute(
            insert(audit_log).values(
                AtUtc=utcnow(),
                Actor=actor.name,
                Role=actor.role,
                Action=action,
                JobIds=json.dumps(list(job_ids)[: limits.MAX_BULK_IDS]),
                JobCount=len(job_ids),
                Details=json.dumps(details, default=str) if details else None,
            )
        )

    def list_audit(
        self, *, job_id: str | None = None, actor: str | None = None, page: int = 1, page_size: int = 100
    ) -> tuple[list[dict[str, Any]], int]:
        conds: list[ColumnElement[bool]] = []
        if job_id:
            conds.append(contains(audit_log.c.JobIds, json.dumps(job_id)))
        if actor:
            conds.append(audit_log.c.Actor == actor)

        def work(c: Connection) -> tuple[list[dict[str, Any]], int]:
            total = c.execute(select(func.count()).select_from(audit_log).where(*conds)).scalar_one()
            rows = c.execute(
                select(audit_log)
                .where(*conds)
                .order_by(audit_log.c.Id.desc())
                .offset((page - 1) * page_size)
                .limit(page_size)
            ).all()
            out = [
                {
                    "id": r.Id,
                    "at_utc": r.AtUtc,
                    "actor": r.Actor,
                    "role": r.Role,
                    "action": r.Action,
                    "job_ids": json.loads(r.JobIds) if r.JobIds else [],
                    "job_count": r.JobCount,
                    "details": json.loads(r.Details) if r.Details else None,
                }
                for r in rows
            ]
            return out, int(total)

        return self.s.read(work, op="list_audit")

    # ------------------------------------------------------------------ listing
    @staticmethod
    def where(location: Location, f: JobFilter) -> list[ColumnElement[bool]]:
        t = TABLES[location]
        conds: list[ColumnElement[bool]] = []
        if f.queue:
            conds.append(t.c.Queue == f.queue)
        if f.type:
            conds.append(t.c.Type == f.type)
        if f.status is not None and location is Location.HOT:
            conds.append(status_is(t.c.Status, int(f.status)))
        if f.failure_reason is not None and location is Location.DLQ:
            conds.append(t.c.FailureReason == int(f.failure_reason))
        if f.tag:
            conds.append(contains(t.c.Tags, f.tag))
        ts = t.c[TIME_COLUMN[location]]
        if f.from_utc:
            conds.append(ts >= f.from_utc)
        if f.to_utc:
            conds.append(ts <= f.to_utc)
        if f.search:
            fields = [t.c.Id, t.c.Type, t.c.Tags]
            if location is Location.DLQ:
                fields.append(t.c.ErrorDetails)
            conds.append(or_(*(contains(col, f.search, ignore_case=True) for col in fields)))
        return conds

    def list_jobs(
        self,
        location: Location,
        f: JobFilter,
        *,
        sort: str | None = None,
        descending: bool = True,
        page: int = 1,
        page_size: int = 100,
    ) -> Page:
        sorts = SORTS[location]
        key = sort or DEFAULT_SORT[location]
        if key not in sorts:
            raise JobValidationError(f"cannot sort {location.value} by {key!r}; choose one of {sorted(sorts)}")
        if not 1 <= page_size <= limits.MAX_BULK_IDS:
            raise JobValidationError(f"page_size must be 1..{limits.MAX_BULK_IDS}")
        if page < 1:
            raise JobValidationError("page starts at 1")
        t = TABLES[location]
        conds = self.where(location, f)
        col = t.c[sorts[key]]
        order = [col.desc() if descending else col.asc(), t.c.Id.desc() if descending else t.c.Id.asc()]

        def work(c: Connection) -> Page:
            total = c.execute(select(func.count()).select_from(t).where(*conds)).scalar_one()
            rows = c.execute(
                select(t).where(*conds).order_by(*order).offset((page - 1) * page_size).limit(page_size)
            ).all()
            return Page([MAPPERS[location](r) for r in rows], int(total), page, page_size)

        return self.s.read(work, op=f"list_{location.value}")

    def top_errors(self, limit: int = 10) -> list[dict[str, Any]]:
        def work(c: Connection) -> list[dict[str, Any]]:
            rows = c.execute(
                select(
                    jobs_dlq.c.Type,
                    jobs_dlq.c.FailureReason,
                    func.count().label("n"),
                    func.max(jobs_dlq.c.FailedAtUtc).label("last"),
                    func.max(jobs_dlq.c.Id).label("sample"),
                )
                .group_by(jobs_dlq.c.Type, jobs_dlq.c.FailureReason)
                .order_by(func.count().desc())
                .limit(limit)
            ).all()
            return [
                {
                    "type": r.Type,
                    "failure_reason": FailureReason(r.FailureReason).label,
                    "count": int(r.n),
                    "last_failed_utc": r.last,
                    "sample_id": r.sample,
                }
                for r in rows
            ]

        return self.s.read(work, op="top_errors")

    def recent_rates(self, minutes: Sequence[int] = (1, 5, 15)) -> dict[str, dict[str, int]]:
        """Jobs archived and dead-lettered in the last N minutes (served by the time indexes)."""

        def work(c: Connection) -> dict[str, dict[str, int]]:
            out: dict[str, dict[str, int]] = {}
            for m in minutes:
                since = utc_offset(seconds(-60.0 * m))
                done = c.execute(
                    select(func.count()).select_from(jobs_archive).where(jobs_archive.c.FinishedAtUtc >= since)
                ).scalar_one()
                dead = c.execute(
                    select(func.count()).select_from(jobs_dlq).where(jobs_dlq.c.FailedAtUtc >= since)
                ).scalar_one()
                out[f"{m}m"] = {"succeeded": int(done), "failed": int(dead)}
            return out

        return self.s.read(work, op="recent_rates")

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

        return self.s.write(work, op="edit_pending")

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

        return self.s.write(work, op="edit_dlq")

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
        def shape(r: dict[str, Any]) -> dict[str, Any]:
            return {
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

        rows = self.s.move_rows(
            c, jobs_dlq, where, jobs_hot, shape, {"ScheduledAtUtc": utcnow(), "LastUpdatedUtc": utcnow()}
        )
        self.s.bump_stats(c, FAILED, Counter(r["Queue"] for r in rows), sign=-1)
        for q in {r["Queue"] for r in rows}:
            self.s.ensure_queue(c, q)
        return rows

    def resurrect(self, job_id: str, actor: Actor, edit: JobEdit | None = None) -> JobRecord:
        """DLQ -> Pending in one move: attempts reset, idempotency key cleared, priority default 10."""

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
            self.audit(c, actor, "dlq.resurrect", [job_id], details)
            self.s.notify(c, rows[0]["Queue"])
            return hot_record(c.execute(select(jobs_hot).where(jobs_hot.c.Id == job_id)).one())

        record = self.s.write(work, op="resurrect")
        self.s.announce()
        return record

    def _match_ids(self, c: Connection, f: JobFilter, max_jobs: int, location: Location,
                   bound: tuple[datetime, str] | None = None) -> tuple[int, list[str], str | None]:
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
            upper = bound[0] + timedelta(microseconds=1)
            inside.append(or_(time_col < bound[0], and_(time_col < upper, t.c.Id <= bound[1])))
        q: Select[Any] = select(t.c.Id).where(*inside).order_by(time_col, t.c.Id).limit(max_jobs)
        newest = c.execute(select(time_col, t.c.Id).where(*conds).order_by(time_col.desc(), t.c.Id.desc())
                           .limit(1)).first()
        snap = _snapshot_text(newest[0], newest[1]) if newest is not None and newest[0] is not None else None
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
            raise JobValidationError("preview first (dry_run: true), then send its matched count as "
                                     "expected_count and its snapshot")
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
            raise ConflictError(f"{matched} dead jobs match the filter now, but {confirmed} were "
                                "previewed and confirmed: nothing was changed; preview again")
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
            details = {"filter": _filter_json(f), "expected_count": expected_count, "snapshot": snapshot} \
                if f is not None else None
            self.audit(c, actor, action, moved, details)
            skipped = [i for i in (unique or chosen) if i not in moved_set]
            return BulkResult(matched, len(moved), moved[:SAMPLE_IDS], skipped_ids=skipped)

        result = self.s.write(work, op=action)
        if result.affected and action == "dlq.resurrect":
            self.s.announce()
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
    ) -> BulkResult:
        def mover(c: Connection, where: ColumnElement[bool]) -> list[str]:
            rows = self._resurrect_rows(c, where, actor)
            return [r["Id"] for r in rows]

        return self._bulk("dlq.resurrect", ids, f, max_jobs, actor, dry_run, mover, expected_count, snapshot)

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
        def mover(c: Connection, where: ColumnElement[bool]) -> list[str]:
            return [r[0] for r in c.execute(delete(jobs_dlq).where(where).returning(jobs_dlq.c.Id)).all()]

        return self._bulk("dlq.purge", ids, f, max_jobs, actor, dry_run, mover, expected_count, snapshot)

    # ------------------------------------------------------------------ cancel and retention
    def cancel(self, ids: Sequence[str], actor: Actor) -> BulkResult:
        """Pending -> DLQ as Cancelled. Jobs a worker owns are skipped and listed."""
        if not ids:
            raise JobValidationError("no ids given")
        if len(ids) > limits.MAX_BULK_IDS:
            raise JobValidationError(f"at most {limits.MAX_BULK_IDS} ids per request")
        ids = list(dict.fromkeys(ids))

        def work(c: Connection) -> BulkResult:
            rows = self.s.move_rows(
                c,
                jobs_hot,
                and_(jobs_hot.c.Id.in_(ids), status_is(jobs_hot.c.Status, PENDING)),
                jobs_dlq,
                _dlq_shape(FailureReason.CANCELLED, f"Cancelled by {actor.name}", actor.name),
                {"FailedAtUtc": utcnow()},
            )
            self.s.bump_stats(c, FAILED, Counter(r["Queue"] for r in rows))
            moved = [r["Id"] for r in rows]
            if moved:
                self.audit(c, actor, "job.cancel", moved)
            done = set(moved)
            return BulkResult(len(ids), len(moved), moved[:SAMPLE_IDS], skipped_ids=[i for i in ids if i not in done])

        return self.s.write(work, op="cancel")

    def purge_archive(
        self,
        older_than: datetime,
        actor: Actor,
        *,
        batch_size: int | None = None,
        progress: Callable[[int], object] | None = None,
    ) -> int:
        """Delete archived jobs finished before ``older_than`` in bounded transactions, so retention
        never holds locks or log space for long."""
        size = batch_size or self.s.settings.cleanup_batch_size
        total = 0
        while True:

            def work(c: Connection) -> int:
                # One statement with two parameters, whatever the batch size: binding the chosen
                # ids one parameter each broke SQL Server's 2,100-parameter limit (error 8003).
                # The oldest ``size`` rows, by the IX_JobsArchive_FinishedAt index.
                old = jobs_archive.c.FinishedAtUtc < older_than
                oldest = select(jobs_archive.c.Id).where(old).order_by(jobs_archive.c.FinishedAtUtc).limit(size)
                res = c.execute(delete(jobs_archive).where(jobs_archive.c.Id.in_(oldest), old))
                n = int(res.rowcount or 0)
                if n:
                    self.audit(
                        c,
                        actor,
                        "archive.purge",
                        [],
                        {"older_than": older_than.isoformat(), "deleted": n, "batch_size": size},
                    )
                return n

            n = self.s.write(work, op="purge_archive")
            total += n
            if progress is not None and n:
                progress(n)
            if n < size:
                break
        return total

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
            info = self.s.update_queue(
                name, paused=paused, zombie_timeout_seconds=zombie_timeout_seconds, max_workers=max_workers, conn=c
            )
            self.audit(c, actor, "queue.update", [], {"queue": name, **changes})
            return info

        return self.s.write(work, op="queue_update")


def contains(col: ColumnElement[Any], needle: str, *, ignore_case: bool = False) -> ColumnElement[bool]:
    """``col`` contains ``needle`` (LIKE, wildcards in ``needle`` escaped), the pattern built here.

    Built in SQL (``'%' + ? + '%'``, ``lower(?)``) the parameter would be an operand SQL Server
    has to guess the type of (see sqlfuncs.seconds).
    """
    escaped = needle.replace("/", "//").replace("%", "/%").replace("_", "/_")
    if ignore_case:
        return func.lower(col).like(f"%{escaped.lower()}%", escape="/")
    return col.like(f"%{escaped}%", escape="/")


def _filter_json(f: JobFilter | None) -> dict[str, Any] | None:
    if f is None:
        return None
    out: dict[str, Any] = {}
    for k, v in f.__dict__.items():
        if v is None:
            continue
        if isinstance(v, FailureReason):
            out[k] = v.label
        elif isinstance(v, JobStatus):
            out[k] = v.name.capitalize()
        else:
            out[k] = v
    return out
