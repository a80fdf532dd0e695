"""A worker's fenced updates of its own leases inside JobsHot: start, heartbeat, release, retry,
reschedule. Each is one UPDATE, cached per count of attempt groups (see :func:`.fence.fence`)."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import bindparam, exists, literal_column, null, true, update
from sqlalchemy.sql.dml import ReturningUpdate
from sqlalchemy.sql.elements import ColumnElement

from chokaq.storage.schema import jobs_hot, queues
from chokaq.storage.sqlfuncs import seconds, utc_offset, utcnow
from chokaq.storage.statements.claim import started_values
from chokaq.storage.statements.fence import fence
from chokaq.storage.statements.status import FETCHED, PENDING, PROCESSING


@functools.lru_cache(maxsize=64)
def start_statement(groups: int, zombie_retry: bool) -> ReturningUpdate[Any]:
    hot = jobs_hot.c
    paused = exists().where(queues.c.Name == hot.Queue, queues.c.IsPaused == true())
    return (
        update(jobs_hot)
        .where(fence(groups, FETCHED), ~paused)
        .values(started_values(zombie_retry))
        # Only what changed: the caller already holds the rest of each row.
        .returning(hot.Id, hot.AttemptCount, hot.StartedAtUtc, hot.HeartbeatUtc, hot.LastUpdatedUtc, hot.ZombieRetry)
    )


@functools.lru_cache(maxsize=32)
def heartbeat_statement(groups: int) -> ReturningUpdate[Any]:
    hot = jobs_hot.c
    return update(jobs_hot).where(fence(groups, PROCESSING)).values(HeartbeatUtc=utcnow()).returning(hot.Id)


@functools.lru_cache(maxsize=32)
def release_statement(groups: int) -> ReturningUpdate[Any]:
    hot = jobs_hot.c
    return (
        update(jobs_hot)
        .where(fence(groups, FETCHED))
        # NULL in the text: a NULL parameter costs pyodbc a describe round trip on SQL Server.
        .values(Status=literal_column(str(PENDING)), WorkerId=null(), LastUpdatedUtc=utcnow())
        .returning(hot.Id)
    )


def back_to_pending(due: ColumnElement[Any]) -> dict[str, ColumnElement[Any]]:
    """A running job made Pending again, due at ``due``: no owner, no heartbeat. (The SET clause
    renders in the table's column order, whatever the order here.)"""
    return {
        "Status": literal_column(str(PENDING)),
        "WorkerId": null(),
        "HeartbeatUtc": null(),
        "ScheduledAtUtc": due,
        "LastUpdatedUtc": utcnow(),
    }


@functools.lru_cache(maxsize=32)
def retry_statement(groups: int, history: bool = False) -> ReturningUpdate[Any]:
    """Processing -> Pending, due ``retry_delay`` seconds from now; with ``history``, the job's
    attempt history becomes ``attempts`` (the failed attempt added by the worker)."""
    values = back_to_pending(utc_offset(seconds(name="retry_delay")))
    if history:
        values["Attempts"] = bindparam("attempts", type_=jobs_hot.c.Attempts.type)
    return update(jobs_hot).where(fence(groups, PROCESSING)).values(values).returning(jobs_hot.c.Queue)


@functools.lru_cache(maxsize=32)
def reschedule_statement(groups: int) -> ReturningUpdate[Any]:
    """Processing -> Pending at once, the attempt given back (a handler stopped on shutdown)."""
    given_back = {"AttemptCount": jobs_hot.c.AttemptCount - literal_column("1")}
    return (
        update(jobs_hot)
        .where(fence(groups, PROCESSING))
        .values({**back_to_pending(utcnow()), **given_back})
        .returning(jobs_hot.c.Id)
    )
