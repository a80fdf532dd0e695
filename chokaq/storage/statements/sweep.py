"""The recovery sweep's statements: abandoned claims back to Pending, expired heartbeats retried or
moved to the DLQ. Each names at most ``size`` jobs, so a backlog is many short transactions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, and_, bindparam, func, literal_column, null, select, true, update
from sqlalchemy.sql.dml import ReturningUpdate
from sqlalchemy.sql.elements import ColumnElement

from chokaq.storage.schema import jobs_hot, queues
from chokaq.storage.sqlfuncs import ListParam, in_list, seconds, utc_offset, utcnow
from chokaq.storage.statements.leases import back_to_pending
from chokaq.storage.statements.moves import MoveStatements, zombie_statements
from chokaq.storage.statements.status import FETCHED, PENDING, PROCESSING, status_is


@dataclass(frozen=True)
class SweepStatements:
    """The sweep's statements, each naming at most ``size`` jobs (see :meth:`Storage.sweep`)."""

    recover: ReturningUpdate[Any]  # Fetched past the timeout -> Pending (their ids returned)
    # The expired jobs to retry (ZombieRetry, attempts left), with the worker that held them.
    retry_ids: Select[Any]
    retry: ReturningUpdate[Any]  # those ids (parameter ``retry_ids``) -> Pending, checked again
    zombie_ids: Select[Any]  # the ids of expired jobs bound for the DLQ
    zombies: MoveStatements  # those ids -> DLQ (parameter ``zombie_ids``), checked again


def sweep_statements(fetched_timeout: float, zombie_timeout: float, max_attempts: int, size: int) -> SweepStatements:
    hot = jobs_hot.c

    def first(where: ColumnElement[bool]) -> Select[Any]:
        """The ids of at most ``size`` rows matching ``where``: any of them, so the database
        reads them in the order of the partial index that serves ``where``, and stops."""
        return select(hot.Id).where(where).limit(size)

    abandoned = and_(status_is(hot.Status, FETCHED), hot.LastUpdatedUtc < utc_offset(seconds(-fetched_timeout)))
    recover = (
        update(jobs_hot)
        .where(hot.Id.in_(first(abandoned)), abandoned)
        .values(Status=literal_column(str(PENDING)), WorkerId=null(), LastUpdatedUtc=utcnow())
        .returning(hot.Id)
    )
    per_queue = select(queues.c.ZombieTimeoutSeconds).where(queues.c.Name == hot.Queue).scalar_subquery()
    timeout = func.coalesce(per_queue, seconds(zombie_timeout))
    # Re-evaluated by the moving statement itself: a heartbeat or a completion that commits
    # first makes the row no longer match, so a live job is never taken (River #1302).
    expired = and_(
        status_is(hot.Status, PROCESSING),
        func.coalesce(hot.HeartbeatUtc, hot.LastUpdatedUtc) < utc_offset(-timeout),
    )
    retryable = and_(hot.ZombieRetry == true(), hot.AttemptCount < literal_column(str(int(max_attempts))))
    # Ids first (with the worker that held each: the crash incident counts the zombies it retried),
    # then the retry by those ids, ``expired`` checked again: a heartbeat that commits between the
    # two keeps its job.
    retry_ids = select(hot.Id, hot.WorkerId, hot.HeartbeatUtc).where(expired, retryable).limit(size)
    retried = in_list(hot.Id, bindparam("retry_ids", type_=ListParam(hot.Id.type)))
    retry = (
        update(jobs_hot)
        .where(retried, expired, retryable)
        .values(back_to_pending(utcnow()))
        .returning(hot.Id, hot.Queue)
    )
    # Ids first, then the move by those ids (with ``expired`` checked again): the copy and the
    # delete then name the same rows although the clock moves between them.
    chosen = in_list(hot.Id, bindparam("zombie_ids", type_=ListParam(hot.Id.type)))
    zombies = zombie_statements(and_(chosen, expired, ~retryable))
    return SweepStatements(recover, retry_ids, retry, first(and_(expired, ~retryable)), zombies)
