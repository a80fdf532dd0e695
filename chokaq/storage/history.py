"""History for the Deck's charts: per time bucket, jobs succeeded, dead-lettered by reason, queue
wait p50/p95 and mean run time, read from JobsArchive and JobsDLQ.

Two GROUP BY statements per call, each a range scan of one time index (``IX_JobsArchive_FinishedAt``
or ``IX_JobsArchive_QueueFinished``; ``IX_JobsDLQ_FailedAt``), the same on every dialect; the
bucket number is integer arithmetic on whole seconds from the window's start. No sampling
thread and no extra table: history is what the tables still hold, so jobs purged from the
archive (retention) drop out of it.

Percentiles. SQLite has no percentile function, and SQL Server's PERCENTILE_CONT is a window
function (one value per row, then DISTINCT: it sorts every row of the window). Portable and
bounded instead: the archive statement also groups by a fixed wait-time bin (a CASE over
log-uniform edges, five per decade from 1 ms: one LOG10 per row, or a binary search over the
edges on SQLite), so it returns at most
buckets x bins rows whatever the row count, and p50/p95 are read from that histogram here,
interpolated linearly inside the bin that holds the rank (as Prometheus' histogram_quantile
does). The error is bounded by that bin's width (edges 10**0.2, i.e. ~1.58x, apart).

Queue wait. Start minus due time: JobsArchive.ScheduledAtUtc, copied from JobsHot (migration 4),
is when the last attempt fell due, so a requested delay or a retry's backoff is not counted as
waiting. Jobs archived before migration 4 have no due time and fall back to their enqueue time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    DateTime,
    Integer,
    Select,
    bindparam,
    case,
    cast,
    func,
    null,
    select,
)

from chokaq.domain.states import FailureReason
from chokaq.storage.dialects import profile_of
from chokaq.storage.schema import jobs_archive, jobs_dlq
from chokaq.storage.sqlfuncs import (
    WAIT_BINS_PER_DECADE,
    WAIT_TOP_BIN,
    millis_between,
    typed_on_mssql,
    wait_bin,
    whole_seconds_since,
)
from chokaq.storage.store import Storage

# window name -> (bucket seconds, bucket count)
WINDOWS: dict[str, tuple[int, int]] = {
    "1h": (60, 60),
    "6h": (300, 72),
    "24h": (900, 96),
    "7d": (3600, 168),
}
WAIT_BASIS = "started_minus_due"

# Upper edges of the wait-time bins, in ms: five log-uniform bins per decade from 1 ms. Bin 0 holds
# waits under 1 ms, bin i holds [EDGES[i-1], EDGES[i]), the top bin everything from 10**8 ms.
WAIT_EDGES_MS: tuple[float, ...] = tuple(10 ** (k / WAIT_BINS_PER_DECADE) for k in range(WAIT_TOP_BIN))


@dataclass
class Bucket:
    start: datetime
    succeeded: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    wait_p50_ms: float | None = None
    wait_p95_ms: float | None = None
    mean_duration_ms: float | None = None
    waits_measured: int = 0

    @property
    def failed_total(self) -> int:
        return sum(self.failed.values())


@dataclass
class History:
    window: str
    bucket_seconds: int
    start: datetime
    end: datetime
    queue: str | None
    buckets: list[Bucket]
    # The oldest job the archive still holds (None: empty). Older history was purged.
    archive_oldest: datetime | None


def window_bounds(window: str, now: datetime) -> tuple[datetime, int, int]:
    """(start, bucket seconds, bucket count): buckets aligned to whole multiples of their size
    since the epoch (UTC), the last one holding ``now``."""
    if window not in WINDOWS:
        raise ValueError(f"unknown window {window!r}; one of {', '.join(WINDOWS)}")
    size, count = WINDOWS[window]
    epoch = datetime(1970, 1, 1)
    naive = now.replace(tzinfo=None) - (now.utcoffset() or timedelta(0)) if now.tzinfo else now
    last = int((naive - epoch).total_seconds()) // size * size
    return epoch + timedelta(seconds=last - (count - 1) * size), size, count


def percentile_from_histogram(counts: dict[int, int], q: float) -> float | None:
    """The q-quantile (0..1) of a histogram over :data:`WAIT_EDGES_MS` bins, interpolated inside
    the bin that holds the rank. None when empty."""
    total = sum(counts.values())
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for b in sorted(counts):
        n = counts[b]
        if n and seen + n >= rank:
            lower = 0.0 if b == 0 else WAIT_EDGES_MS[b - 1]
            upper = WAIT_EDGES_MS[b] if b < len(WAIT_EDGES_MS) else lower  # open top bin: its edge
            return lower + (upper - lower) * max(0.0, rank - seen) / n
        seen += n
    return WAIT_EDGES_MS[-1]


def history_statements(queue: str | None) -> tuple[Select[Any], Select[Any]]:
    """The archive and DLQ statements (parameters ``h_start``, ``h_end``, ``h_size``, and ``h_queue``
    when ``queue`` is given). Exposed for the SQL Server compile test.

    Each computes the bucket in a derived table and groups by its columns: grouping by the
    expression itself would repeat its parameters, and PostgreSQL (server-side binding) and SQL
    Server see ``$1`` and ``$5`` (or two ``?``) as different expressions from the SELECT list's.
    """
    start = bindparam("h_start", type_=DateTime())
    end = bindparam("h_end", type_=DateTime())
    # A divisor parameter: typed on SQL Server, which cannot describe a bare operand of "/".
    size = typed_on_mssql(bindparam("h_size", type_=Integer()))
    a = jobs_archive.c
    wait_ms = millis_between(func.coalesce(a.ScheduledAtUtc, a.CreatedAtUtc), a.StartedAtUtc)
    inner_a = select(
        (whole_seconds_since(a.FinishedAtUtc, start) // size).label("bucket"),
        case((a.StartedAtUtc.is_(None), null()), else_=wait_bin(wait_ms)).label("wait_bin"),
        a.DurationMs.label("dur"),
    ).where(a.FinishedAtUtc >= start, a.FinishedAtUtc < end)
    d = jobs_dlq.c
    inner_d = select(
        (whole_seconds_since(d.FailedAtUtc, start) // size).label("bucket"),
        d.FailureReason.label("reason"),
    ).where(d.FailedAtUtc >= start, d.FailedAtUtc < end)
    if queue is not None:
        q = bindparam("h_queue", type_=jobs_archive.c.Queue.type)
        inner_a = inner_a.where(a.Queue == q)
        inner_d = inner_d.where(d.Queue == q)
    ta = inner_a.subquery("h")
    archive = select(
        ta.c.bucket,
        ta.c.wait_bin,
        func.count().label("n"),
        func.sum(cast(ta.c.dur, BigInteger)).label("dur_sum"),
        func.count(ta.c.dur).label("dur_n"),
    ).group_by(ta.c.bucket, ta.c.wait_bin)
    td = inner_d.subquery("h")
    dlq = select(td.c.bucket, td.c.reason, func.count().label("n")).group_by(td.c.bucket, td.c.reason)
    return archive, dlq


def read_history(conn: Connection, window: str, *, now: datetime, queue: str | None = None) -> History:
    """History for ``window`` ending in the bucket that holds ``now`` (the database's clock)."""
    start, size, count = window_bounds(window, now)
    end = start + timedelta(seconds=size * count)
    buckets = [Bucket(start + timedelta(seconds=size * i)) for i in range(count)]
    params: dict[str, Any] = {"h_start": start, "h_end": end, "h_size": size}
    if queue is not None:
        params["h_queue"] = queue
    archive_stmt, dlq_stmt = history_statements(queue)
    waits: list[dict[int, int]] = [{} for _ in range(count)]
    dur_sum = [0] * count
    dur_n = [0] * count
    for row in conn.execute(archive_stmt, params):
        i = int(row.bucket)
        if not 0 <= i < count:
            continue  # cannot happen for rows inside [start, end); guards a clock edge
        buckets[i].succeeded += int(row.n)
        if row.wait_bin is not None:
            waits[i][int(row.wait_bin)] = waits[i].get(int(row.wait_bin), 0) + int(row.n)
        dur_sum[i] += int(row.dur_sum or 0)
        dur_n[i] += int(row.dur_n or 0)
    for row in conn.execute(dlq_stmt, params):
        i = int(row.bucket)
        if not 0 <= i < count:
            continue
        label = FailureReason(int(row.reason)).label
        buckets[i].failed[label] = buckets[i].failed.get(label, 0) + int(row.n)
    for i, b in enumerate(buckets):
        b.waits_measured = sum(waits[i].values())
        b.wait_p50_ms = percentile_from_histogram(waits[i], 0.50)
        b.wait_p95_ms = percentile_from_histogram(waits[i], 0.95)
        b.mean_duration_ms = dur_sum[i] / dur_n[i] if dur_n[i] else None
    oldest_stmt = select(func.min(jobs_archive.c.FinishedAtUtc))
    if queue is not None:
        oldest_stmt = oldest_stmt.where(jobs_archive.c.Queue == queue)
    oldest = conn.execute(oldest_stmt).scalar()
    return History(window, size, start, end, queue, buckets, oldest)


def load_history(storage: Storage, window: str, *, queue: str | None = None, now: datetime | None = None) -> History:
    """:func:`read_history` in one read transaction, on the database's clock unless ``now`` is given."""
    if window not in WINDOWS:
        raise ValueError(f"unknown window {window!r}; one of {', '.join(WINDOWS)}")

    def work(c: Connection) -> History:
        profile_of(c.dialect).tune_history_read(c)
        return read_history(c, window, now=now or storage.db_now(c), queue=queue)

    return storage.read(work, op="history")
