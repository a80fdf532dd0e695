"""Operator reads: jobs by filter and sort in each table, the audit trail, top errors, recent rates."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, Table, func, or_, select
from sqlalchemy.sql.elements import ColumnElement

from chokaq.domain import limits
from chokaq.domain.errors import JobValidationError
from chokaq.domain.states import Location
from chokaq.storage.admin_types import JobFilter, Page
from chokaq.storage.queue_figures import top_error_groups
from chokaq.storage.records import archive_record, dlq_record, hot_record
from chokaq.storage.schema import NOTES_COLUMNS, audit_log, jobs_archive, jobs_dlq, jobs_hot
from chokaq.storage.statements import status_is
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
LIST_SKIPS = NOTES_COLUMNS | {"Attempts"}
TABLES: dict[Location, Table] = {Location.HOT: jobs_hot, Location.ARCHIVE: jobs_archive, Location.DLQ: jobs_dlq}
MAPPERS = {Location.HOT: hot_record, Location.ARCHIVE: archive_record, Location.DLQ: dlq_record}


# A page's ``total`` is counted exactly up to this many matches (Admin.ExactCountLimit's default).
DEFAULT_COUNT_CAP = 10_000


class JobListing:
    """The reads behind the Deck's tables and the CLI's listings; :class:`AdminStore` adds actions.

    A page's total is exact up to ``count_cap`` matches; past it the count stops there and the page
    says its total is a lower bound (docs/admin-figures.md): counting every match of a million-row
    table would make each page cost what the table's size costs. ``None``: always count in full.
    """

    def __init__(self, storage: Storage, *, count_cap: int | None = DEFAULT_COUNT_CAP) -> None:
        self.storage = storage
        self.count_cap = count_cap

    def list_audit(
        self, *, job_id: str | None = None, actor: str | None = None, page: int = 1, page_size: int = 100
    ) -> tuple[list[dict[str, Any]], int]:
        """One page of the audit trail, newest first, and its total (see :meth:`audit_page`)."""
        rows, total, _ = self.audit_page(job_id=job_id, actor=actor, page=page, page_size=page_size)
        return rows, total

    def audit_page(
        self, *, job_id: str | None = None, actor: str | None = None, page: int = 1, page_size: int = 100
    ) -> tuple[list[dict[str, Any]], int, bool]:
        """One page of the audit trail, newest first, its total and whether that is a lower bound."""
        conds: list[ColumnElement[bool]] = []
        if job_id:
            conds.append(contains(audit_log.c.JobIds, json.dumps(job_id)))
        if actor:
            conds.append(audit_log.c.Actor == actor)

        def work(c: Connection) -> tuple[list[dict[str, Any]], int, bool]:
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
            total, lower = bounded_total(
                c, audit_log, conds, self.count_cap, (page - 1) * page_size, len(rows), page_size
            )
            return out, total, lower

        return self.storage.read(work, op="list_audit")

    # ------------------------------------------------------------------ listing
    def where(self, location: Location, f: JobFilter) -> list[ColumnElement[bool]]:
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
        if f.min_attempts:
            conds.append(t.c.AttemptCount >= f.min_attempts)
        if f.worker:
            conds.append(t.c.WorkerId == f.worker)
        ts = t.c[TIME_COLUMN[location]]
        if f.from_utc:
            conds.append(ts >= f.from_utc)
        if f.to_utc:
            conds.append(ts <= f.to_utc)
        if f.search:
            conds.append(self.search(location, t, f.search))
        return conds

    def search(self, location: Location, t: Table, needle: str) -> ColumnElement[bool]:
        """Id, type, tags (and a dead job's error text) contain ``needle``, any case. The DLQ's is
        served by an index where the database has one (dialects/search_indexes.py); the same rows
        match either way."""
        indexed = self.storage.profile.dlq_search(needle) if location is Location.DLQ else None
        if indexed is not None:
            return indexed
        fields = [t.c.Id, t.c.Type, t.c.Tags]
        if location is Location.DLQ:
            fields.append(t.c.ErrorDetails)
        return or_(*(contains(col, needle, ignore_case=True) for col in fields))

    def list_jobs(
        self,
        location: Location,
        f: JobFilter,
        *,
        sort: str | None = None,
        descending: bool = True,
        page: int = 1,
        page_size: int = 100,
        exact_total: bool = False,
    ) -> Page:
        """One page of ``location``'s jobs; ``exact_total``: count every match, whatever it costs."""
        cap = None if exact_total else self.count_cap
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
            rows = c.execute(
                # Not the attempt history, logs or progress: a page shows none, and they can be the
                # largest columns.
                select(*(col for col in t.c if col.name not in LIST_SKIPS))
                .where(*conds)
                .order_by(*order)
                .offset((page - 1) * page_size)
                .limit(page_size)
            ).all()
            total, lower = bounded_total(c, t, conds, cap, (page - 1) * page_size, len(rows), page_size)
            return Page([MAPPERS[location](r) for r in rows], total, page, page_size, total_is_lower_bound=lower)

        return self.storage.read(work, op=f"list_{location.value}")

    def top_errors(self, limit: int = 10) -> list[dict[str, Any]]:
        """Counted now over the whole DLQ; the API serves :class:`FiguresCache`'s instead."""
        return self.storage.read(lambda c: top_error_groups(c, limit), op="top_errors")

    def recent_rates(self, minutes: Sequence[int] = (1, 5, 15)) -> dict[str, dict[str, int]]:
        """Jobs archived and dead-lettered in the last N minutes (served by the time indexes)."""

        def work(c: Connection) -> dict[str, dict[str, int]]:
            out: dict[str, dict[str, int]] = {}
            # The bound is a value from the database's clock, not ``now() - n``: PostgreSQL's
            # clock_timestamp() is volatile, and an index cannot serve a bound that is.
            now = self.storage.db_now(c)
            for m in minutes:
                since = now - timedelta(minutes=m)
                done = c.execute(
                    select(func.count()).select_from(jobs_archive).where(jobs_archive.c.FinishedAtUtc >= since)
                ).scalar_one()
                dead = c.execute(
                    select(func.count()).select_from(jobs_dlq).where(jobs_dlq.c.FailedAtUtc >= since)
                ).scalar_one()
                out[f"{m}m"] = {"succeeded": int(done), "failed": int(dead)}
            return out

        return self.storage.read(work, op="recent_rates")


def bounded_total(
    c: Connection,
    t: Table,
    conds: Sequence[ColumnElement[bool]],
    cap: int | None,
    offset: int,
    shown: int,
    page_size: int,
) -> tuple[int, bool]:
    """How many rows of ``t`` match ``conds``, reading at most ``cap + 1`` of them, and whether the
    number is a lower bound (more than ``cap`` match; ``cap`` None: count them all)."""
    if 0 < shown < page_size:
        # A page neither empty nor full is the last one: where it ends is the total.
        return offset + shown, False
    if cap is None:
        return int(c.execute(select(func.count()).select_from(t).where(*conds)).scalar_one()), False
    if shown and offset + shown > cap:
        # A full page past the cap: at least the rows up to its end match (an empty page past
        # the end is counted instead, so the Deck can step back to the last page).
        return offset + shown, True
    inner = select(t.c.Id).where(*conds).limit(cap + 1).subquery()
    counted = int(c.execute(select(func.count()).select_from(inner)).scalar_one())
    return (counted, False) if counted <= cap else (cap, True)


def contains(col: ColumnElement[Any], needle: str, *, ignore_case: bool = False) -> ColumnElement[bool]:
    """``col`` contains ``needle`` (LIKE, wildcards in ``needle`` escaped), the pattern built here.

    Built in SQL (``'%' + ? + '%'``, ``lower(?)``) the parameter would be an operand SQL Server
    has to guess the type of (see sqlfuncs.seconds).
    """
    escaped = needle.replace("/", "//").replace("%", "/%").replace("_", "/_")
    if ignore_case:
        # lower() typed as its column: the pattern is then sent as NVARCHAR where the column is
        # one (SQL Server), not as the VARCHAR of a generic string, which loses other scripts.
        return func.lower(col, type_=col.type).like(f"%{escaped.lower()}%", escape="/")
    return col.like(f"%{escaped}%", escape="/")
