"""Storing one new job: an INSERT into JobsHot, built once per shape.

On PostgreSQL the statement also sends its queue's NOTIFY (``RETURNING pg_notify(...)``), which
the server delivers when the insert commits, and only then. The job and its wake-up are therefore
one statement: in autocommit that is one round trip, where BEGIN, INSERT, NOTIFY and COMMIT were
four, and enqueue -> start latency starts with the enqueue call.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Select, bindparam, false, func, insert, literal_column, null, select
from sqlalchemy.sql.dml import Insert
from sqlalchemy.sql.elements import ColumnElement

from chokaq.domain.models import EnqueueRequest
from chokaq.storage.dialects.postgres import NOTIFY_CHANNEL
from chokaq.storage.schema import jobs_hot
from chokaq.storage.sqlfuncs import ListParam, in_list, seconds, utc_offset, utcnow
from chokaq.storage.statements.status import PENDING


def _given(name: str, column: Any, present: bool) -> ColumnElement[Any]:
    """A typed parameter, or NULL in the text when the value is None (a NULL parameter costs
    pyodbc a describe round trip on SQL Server)."""
    return bindparam(name, type_=column.type) if present else null()


@functools.lru_cache(maxsize=64)
def enqueue_statement(
    *, tags: bool, key: bool, created_by: bool, delayed: bool, notify: bool, at: bool = False
) -> Insert:
    """The INSERT of one Pending job; parameters from :func:`enqueue_params`. ``tags``, ``key``,
    ``created_by``: whether those values are given; ``delayed``: ScheduledAtUtc is now plus
    ``job_delay`` seconds, not now; ``at``: ScheduledAtUtc is ``job_at`` (UTC); ``notify``:
    PostgreSQL's NOTIFY rides in the RETURNING."""
    hot = jobs_hot.c
    if at:
        due: ColumnElement[Any] = bindparam("job_at", type_=hot.ScheduledAtUtc.type)
    else:
        due = utc_offset(seconds(name="job_delay")) if delayed else utcnow()
    stmt = insert(jobs_hot).values(
        Id=bindparam("job_id", type_=hot.Id.type),
        Queue=bindparam("job_queue", type_=hot.Queue.type),
        Type=bindparam("job_type", type_=hot.Type.type),
        Payload=bindparam("job_payload", type_=hot.Payload.type),
        Tags=_given("job_tags", hot.Tags, tags),
        IdempotencyKey=_given("job_key", hot.IdempotencyKey, key),
        Priority=bindparam("job_priority", type_=hot.Priority.type),
        Status=literal_column(str(PENDING)),
        AttemptCount=literal_column("0"),
        ScheduledAtUtc=due,
        CreatedAtUtc=utcnow(),
        LastUpdatedUtc=utcnow(),
        CreatedBy=_given("job_created_by", hot.CreatedBy, created_by),
        ZombieRetry=false(),
    )
    if notify:
        stmt = stmt.returning(func.pg_notify(NOTIFY_CHANNEL, hot.Queue))
    return stmt


def statement_for(req: EnqueueRequest, *, notify: bool) -> Insert:
    """:func:`enqueue_statement` in the shape ``req`` needs."""
    return enqueue_statement(
        tags=req.tags is not None,
        key=req.idempotency_key is not None,
        created_by=req.created_by is not None,
        delayed=bool(req.delay_seconds),
        notify=notify,
        at=req.scheduled_at is not None,
    )


def enqueue_params(job_id: str, req: EnqueueRequest) -> dict[str, Any]:
    """The parameters of :func:`statement_for` ``(req)`` (values it leaves out are not read)."""
    params: dict[str, Any] = {
        "job_id": job_id,
        "job_queue": req.queue,
        "job_type": req.type,
        "job_payload": req.payload,
        "job_priority": req.priority,
    }
    if req.tags is not None:
        params["job_tags"] = req.tags
    if req.idempotency_key is not None:
        params["job_key"] = req.idempotency_key
    if req.created_by is not None:
        params["job_created_by"] = req.created_by
    if req.delay_seconds:
        params["job_delay"] = float(req.delay_seconds)
    if req.scheduled_at is not None:
        params["job_at"] = req.scheduled_at
    return params


# The columns a bulk row carries, by name (see bulk_insert_statement); ``delay`` or ``ScheduledAtUtc``
# for its due time, and ``IdempotencyKey`` in a keyed statement's rows.
BULK_COLUMNS = ("Id", "Queue", "Type", "Payload", "Tags", "Priority", "CreatedBy")


def _bulk_values(at: bool) -> dict[str, Any]:
    """What every bulk row gets from the statement, not from its parameters."""
    values: dict[str, Any] = {
        "Status": literal_column(str(PENDING)),
        "AttemptCount": literal_column("0"),
        "ZombieRetry": false(),
        "CreatedAtUtc": utcnow(),
        "LastUpdatedUtc": utcnow(),
    }
    if not at:
        values["ScheduledAtUtc"] = utc_offset(seconds(name="delay"))
    return values


@functools.lru_cache(maxsize=8)
def bulk_insert_statement(*, at: bool) -> Insert:
    """The INSERT that many rows run (an executemany): the columns of :data:`BULK_COLUMNS` (and
    ``IdempotencyKey`` when the rows have it) come from each row, as does its due time: a
    ``delay`` in seconds from the database's clock, or ``ScheduledAtUtc`` itself when ``at``."""
    return insert(jobs_hot).values(**_bulk_values(at))


def bulk_row_columns(*, at: bool, keyed: bool) -> int:
    """The columns one row of :func:`bulk_insert_statement` fills."""
    return len(BULK_COLUMNS) + len(_bulk_values(at)) + int(at) + int(keyed)


@functools.cache
def keyed_ids_statement() -> Select[Any]:
    """``(IdempotencyKey, Id)`` of the live jobs holding any of ``:keys`` (one list parameter)."""
    hot = jobs_hot.c
    return select(hot.IdempotencyKey, hot.Id).where(
        in_list(hot.IdempotencyKey, bindparam("keys", type_=ListParam(hot.IdempotencyKey.type)))
    )


@functools.cache
def key_holder_statement() -> Select[Any]:
    """The id of the live job holding the idempotency key ``:job_key``."""
    return select(jobs_hot.c.Id).where(jobs_hot.c.IdempotencyKey == bindparam("job_key"))
