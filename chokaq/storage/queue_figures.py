"""Per-queue figures for operators: jobs by state, DLQ size, running totals and the oldest due lag.

Counting JobsHot and JobsDLQ means reading every row: fine at a thousand jobs, 0.9 s a call at half a
million. :mod:`chokaq.storage.figures_cache` decides when to count (see docs/admin-figures.md); this
module holds the counts themselves and puts them together with the running totals.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Table, func, select

from chokaq.domain.models import QueueStats
from chokaq.domain.states import FailureReason
from chokaq.storage.schema import jobs_dlq, jobs_hot, queues, stats_summary
from chokaq.storage.sqlfuncs import utcnow
from chokaq.storage.statements import FETCHED, PENDING, PROCESSING, status_is


@dataclass
class HotCounts:
    """JobsHot by queue and status, and each queue's oldest due Pending job."""

    by_status: dict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    oldest_due: dict[str, datetime] = field(default_factory=dict)


def count_hot(c: Connection) -> HotCounts:
    out = HotCounts()
    for q, status, n in c.execute(
        select(jobs_hot.c.Queue, jobs_hot.c.Status, func.count()).group_by(jobs_hot.c.Queue, jobs_hot.c.Status)
    ).all():
        out.by_status[q][int(status)] = int(n)
    out.oldest_due = {
        r[0]: r[1]
        for r in c.execute(
            select(jobs_hot.c.Queue, func.min(jobs_hot.c.ScheduledAtUtc))
            .where(status_is(jobs_hot.c.Status, PENDING), jobs_hot.c.ScheduledAtUtc <= utcnow())
            .group_by(jobs_hot.c.Queue)
        ).all()
    }
    return out


def count_dlq(c: Connection) -> dict[str, int]:
    return {r[0]: int(r[1]) for r in c.execute(select(jobs_dlq.c.Queue, func.count()).group_by(jobs_dlq.c.Queue))}


def top_error_groups(c: Connection, limit: int) -> list[dict[str, Any]]:
    """The largest (type, failure reason) groups of the DLQ, with the last failure and a sample id."""
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


def capped_count(c: Connection, table: Table, cap: int) -> int:
    """The number of rows in ``table``, reading at most ``cap + 1`` of them (any index will do)."""
    inner = select(table.c.Id).limit(cap + 1).subquery()
    return int(c.execute(select(func.count()).select_from(inner)).scalar_one())


def assemble(c: Connection, hot: HotCounts, dlq: dict[str, int], now: datetime) -> list[QueueStats]:
    """Every queue that has a row, jobs or totals, from the given counts and the running totals
    (read here: one StatsSummary row per queue, exact). ``now`` is the database's clock."""
    totals = {r.Queue: r for r in c.execute(select(stats_summary)).all()}
    names = sorted(set(hot.by_status) | set(dlq) | set(totals) | {r[0] for r in c.execute(select(queues.c.Name)).all()})
    out = []
    for name in names:
        t = totals.get(name)
        first = hot.oldest_due.get(name)
        counts = hot.by_status.get(name, Counter())
        out.append(
            QueueStats(
                queue=name,
                pending=counts[PENDING],
                fetched=counts[FETCHED],
                processing=counts[PROCESSING],
                succeeded_total=int(t.SucceededTotal) if t else 0,
                failed_total=int(t.FailedTotal) if t else 0,
                retried_total=int(t.RetriedTotal) if t else 0,
                dlq_size=int(dlq.get(name, 0)),
                oldest_pending_lag_seconds=max(0.0, (now - first).total_seconds()) if first else None,
                last_activity_utc=t.LastActivityUtc if t else None,
            )
        )
    return out


def read_queue_stats(c: Connection, now: datetime) -> list[QueueStats]:
    """Every figure counted now (the CLI's ``chokaq stats``, and the tests' full count)."""
    return assemble(c, count_hot(c), count_dlq(c), now)
