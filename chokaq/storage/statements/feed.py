"""The event feed's statements (docs/live-events.md): one row written in the transaction of the
change it describes, read by cursor (the primary key, a range read however large the table), and
purged a bounded batch at a time by age (Events.Retention) and by count (Events.MaxRows)."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import BigInteger, Delete, Insert, Select, String, bindparam, cast, delete, func, insert, select

from chokaq.storage.schema import LongText, event_feed
from chokaq.storage.sqlfuncs import seconds, utc_offset, utcnow

_COLUMNS = (event_feed.c.Id, event_feed.c.AtUtc, event_feed.c.Kind, event_feed.c.Origin, event_feed.c.Data)


@functools.lru_cache(maxsize=1)
def feed_insert_statement() -> Insert:
    """One event row: ``feed_kind``, ``feed_origin`` (the writing storage) and ``feed_data`` (JSON),
    stamped with the database's clock."""
    return insert(event_feed).values(
        AtUtc=utcnow(),
        Kind=bindparam("feed_kind", type_=String(50)),
        Origin=bindparam("feed_origin", type_=String(64)),
        Data=bindparam("feed_data", type_=LongText),
    )


def _after() -> Any:
    return cast(bindparam("feed_after", type_=BigInteger()), BigInteger())


@functools.lru_cache(maxsize=8)
def feed_after_statement(limit: int) -> Select[Any]:
    """The rows after the cursor ``feed_after``, oldest first, at most ``limit``."""
    return select(*_COLUMNS).where(event_feed.c.Id > _after()).order_by(event_feed.c.Id).limit(limit)


@functools.lru_cache(maxsize=8)
def feed_latest_statement(limit: int) -> Select[Any]:
    """The newest ``limit`` rows, newest first (a follower's start, a first poll's backlog)."""
    return select(*_COLUMNS).order_by(event_feed.c.Id.desc()).limit(limit)


@functools.lru_cache(maxsize=1)
def feed_head_statement() -> Select[Any]:
    """The newest id (NULL on an empty feed): where a new follower's cursor starts."""
    return select(func.max(event_feed.c.Id))


@functools.lru_cache(maxsize=8)
def feed_purge_count_statement(size: int) -> Delete:
    """Delete the oldest ``size`` rows beyond the newest ``feed_keep`` ids. Ids only grow, so
    every row kept has an id within ``feed_keep`` of the newest: at most that many rows stay."""
    newest = select(func.max(event_feed.c.Id)).scalar_subquery()
    keep = cast(bindparam("feed_keep", type_=BigInteger()), BigInteger())
    beyond = event_feed.c.Id <= newest - keep
    oldest = select(event_feed.c.Id).where(beyond).order_by(event_feed.c.Id).limit(size)
    return delete(event_feed).where(event_feed.c.Id.in_(oldest))


@functools.lru_cache(maxsize=8)
def feed_purge_age_statement(max_age: float, size: int) -> Delete:
    """Delete the oldest ``size`` rows written more than ``max_age`` seconds ago (the database's
    clock, as the rows were stamped)."""
    old = event_feed.c.AtUtc < utc_offset(seconds(-max_age))
    oldest = select(event_feed.c.Id).where(old).order_by(event_feed.c.Id).limit(size)
    return delete(event_feed).where(event_feed.c.Id.in_(oldest), old)
