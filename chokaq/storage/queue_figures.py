"""Per-queue figures for operators: jobs by state, DLQ size, running totals and the oldest due lag."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime

from sqlalchemy import Connection, func, select

from chokaq.domain.models import QueueStats
from chokaq.storage.schema import jobs_dlq, jobs_hot, queues, stats_summary
from chokaq.storage.sqlfuncs import utcnow
from chokaq.storage.statements import FETCHED, PENDING, PROCESSING, status_is


def read_queue_stats(c: Connection, now: datetime) -> list[QueueStats]:
    """Every queue that has a row, jobs or totals; ``now`` is the database's clock."""
    counts: dict[str, Counter[int]] = defaultdict(Counter)
    for q, status, n in c.execute(
        select(jobs_hot.c.Queue, jobs_hot.c.Status, func.count()).group_by(jobs_hot.c.Queue, jobs_hot.c.Status)
    ).all():
        counts[q][int(status)] = int(n)
    oldest: dict[str, datetime] = {
        r[0]: r[1]
        for r in c.execute(
            select(jobs_hot.c.Queue, func.min(jobs_hot.c.ScheduledAtUtc))
            .where(status_is(jobs_hot.c.Status, PENDING), jobs_hot.c.ScheduledAtUtc <= utcnow())
            .group_by(jobs_hot.c.Queue)
        ).all()
    }
    dlq: dict[str, int] = {
        r[0]: int(r[1]) for r in c.execute(select(jobs_dlq.c.Queue, func.count()).group_by(jobs_dlq.c.Queue)).all()
    }
    totals = {r.Queue: r for r in c.execute(select(stats_summary)).all()}
    names = sorted(set(counts) | set(dlq) | set(totals) | {r[0] for r in c.execute(select(queues.c.Name)).all()})
    out = []
    for name in names:
        t = totals.get(name)
        first = oldest.get(name)
        out.append(
            QueueStats(
                queue=name,
                pending=counts[name][PENDING],
                fetched=counts[name][FETCHED],
                processing=counts[name][PROCESSING],
                succeeded_total=int(t.SucceededTotal) if t else 0,
                failed_total=int(t.FailedTotal) if t else 0,
                retried_total=int(t.RetriedTotal) if t else 0,
                dlq_size=int(dlq.get(name, 0)),
                oldest_pending_lag_seconds=max(0.0, (now - first).total_seconds()) if first else None,
                last_activity_utc=t.LastActivityUtc if t else None,
            )
        )
    return out
