"""The StatsSummary counters a move or a retry adds to, and the statement that adds to one."""

from __future__ import annotations

import functools
from typing import Literal, TypeAlias

from sqlalchemy import BigInteger, Insert, Update, bindparam, cast, insert, update

from chokaq.storage.schema import stats_summary
from chokaq.storage.sqlfuncs import utcnow

# The running totals per queue; the column names are the vocabulary (StatsSummary's columns).
StatsCounter: TypeAlias = Literal["SucceededTotal", "FailedTotal", "RetriedTotal"]
SUCCEEDED: StatsCounter = "SucceededTotal"
FAILED: StatsCounter = "FailedTotal"
RETRIED: StatsCounter = "RetriedTotal"


@functools.lru_cache(maxsize=8)
def bump_statement(column: StatsCounter) -> Update:
    """Add ``stats_delta`` to one counter of queue ``stats_queue`` (an existing row: see
    :func:`moving.bump_stats`, which inserts the row when this finds none)."""
    col = stats_summary.c[column]
    delta = cast(bindparam("stats_delta", type_=BigInteger()), BigInteger())
    return (
        update(stats_summary)
        .where(stats_summary.c.Queue == bindparam("stats_queue"))
        .values({col: col + delta, stats_summary.c.LastActivityUtc: utcnow()})
    )


@functools.lru_cache(maxsize=8)
def counter_insert_statement(column: StatsCounter) -> Insert:
    """A new StatsSummary row for queue ``stats_queue`` starting ``column`` at ``stats_delta`` (the
    insert :func:`moving.bump_stats` makes when :func:`bump_statement` finds no row, with the
    values bound, so the statement renders once)."""
    return insert(stats_summary).values(
        {
            "Queue": bindparam("stats_queue"),
            column: cast(bindparam("stats_delta", type_=BigInteger()), BigInteger()),
            "LastActivityUtc": utcnow(),
        }
    )
