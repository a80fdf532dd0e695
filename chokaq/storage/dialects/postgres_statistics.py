"""PostgreSQL planner statistics of JobsHot: refreshed by the workers when a burst made them stale."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import text

from chokaq.storage.schema import SCHEMA, jobs_hot
from chokaq.storage.transactions import Transactions

log = logging.getLogger("chokaq.storage")

# Seconds: how recent an ANALYZE spares a table whose rows merely changed (see refresh_statistics).
STATISTICS_MIN_AGE = 10.0
# Pages (8 KiB each): below this a table is too small for its plan to matter, about 1,000 small jobs.
GROWN_MIN_PAGES = 16

# The row counts come from the cumulative statistics, which a backend reports up to ten seconds
# late (it holds them back while it flushed in the last second); the table's size on disk is
# current the moment rows are written.
# Whether this role may ANALYZE the table: its owner's or the database owner's privileges (a
# member of either role, or a superuser). PostgreSQL 17's MAINTAIN privilege is not asked: a role
# that has only that is taken for one that cannot, so it neither ANALYZEs here nor prepares the
# claim (autovacuum still analyses).
_STALENESS = text(
    "SELECT s.n_mod_since_analyze, s.n_live_tup, c.reltuples, "
    "EXTRACT(EPOCH FROM now() - GREATEST(s.last_analyze, s.last_autoanalyze)), "
    "pg_relation_size(c.oid) / current_setting('block_size')::int, c.relpages, "
    "pg_has_role(c.relowner, 'USAGE') OR pg_has_role(d.datdba, 'USAGE') "
    "FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid "
    "JOIN pg_database d ON d.datname = current_database() "
    "WHERE s.schemaname = :schema AND s.relname = :table"
)


class StatisticsCheck:
    """The check for one Storage. A role that may not ANALYZE JobsHot does not try. It remembers
    the file's size at the last ANALYZE it ran: where that ANALYZE did not update the planner's
    page count, the size trigger would otherwise fire on every check, for as long as the file stays
    big, which it does after the burst has drained."""

    def __init__(self, tx: Transactions) -> None:
        self.tx = tx
        self.analysed_pages = 0
        # Whether the last check found that this role can ANALYZE JobsHot and its ANALYZE did not
        # fail (False until a check ran).
        self.can_analyse = False

    @property
    def keeps_plans_current(self) -> bool:
        """Whether this Storage's checks run and their ANALYZE takes effect, so a prepared claim's
        cached plan is planned again soon after a burst. Without that, a generic plan made while
        the table was small would outlive the burst until autovacuum analyses the table."""
        return self.can_analyse

    def refresh(self, *, min_age: float = STATISTICS_MIN_AGE) -> bool:
        staleness = read_staleness(self.tx)
        self.can_analyse = staleness is not None and staleness.can_analyse
        if staleness is None or not staleness.can_analyse:
            # PostgreSQL would skip the ANALYZE with a warning, on every check while the counts
            # say the table grew (they may arrive seconds late, so "grew" can be news twice).
            return False
        try:
            ran = refresh_statistics(self.tx, min_age=min_age, analysed_pages=self.analysed_pages, staleness=staleness)
        except Exception:
            # An ANALYZE that fails (a lock or statement timeout) refreshes no plan either.
            self.can_analyse = False
            raise
        if ran is not None:
            self.analysed_pages = ran
        return ran is not None


@dataclass(frozen=True, slots=True)
class Staleness:
    """What the planner believes of JobsHot against what it holds now."""

    changed: int  # rows changed since the last ANALYZE (as reported: up to ten seconds late)
    live: int  # live rows (as reported)
    planned: float  # rows the planner last counted
    age: float | None  # seconds since the last ANALYZE (None: never analysed)
    pages: int  # the file's size now
    planned_pages: int  # the file's size the planner last counted
    can_analyse: bool  # this role may ANALYZE it


def read_staleness(tx: Transactions) -> Staleness | None:
    """One read of JobsHot's statistics (None: the table is not there)."""
    row = tx.read(
        lambda c: c.execute(_STALENESS, {"schema": SCHEMA, "table": jobs_hot.name}).first(),
        op="statistics_check",
    )
    if row is None:
        return None
    return Staleness(
        changed=int(row[0]),
        live=int(row[1]),
        planned=max(float(row[2]), 0.0),
        age=None if row[3] is None else float(row[3]),
        pages=int(row[4]),
        planned_pages=max(int(row[5]), 0),
        can_analyse=bool(row[6]),
    )


def refresh_statistics(
    tx: Transactions, *, min_age: float = STATISTICS_MIN_AGE, analysed_pages: int = 0, staleness: Staleness
) -> int | None:
    """PostgreSQL only: ANALYZE JobsHot when the planner's picture of it (``staleness``) is stale.
    Returns the file's size in pages if it did, else None. Busy workers call it about once a second.

    A burst into a new or quiet table leaves the planner believing there are almost no
    Pending rows. It then claims by reading and sorting every Pending row instead of walking
    the fetch index, so each claim costs O(backlog) until autovacuum catches up, which takes
    up to autovacuum_naptime (a minute by default).

    Two triggers. A burst is analysed at once: the table holds more than twice the rows the
    planner last counted (and over 1,000), or its file has grown to more than twice the pages
    the planner last counted (and over 16). The file's size is what shows a burst in the first
    seconds, before the row counts are reported. Otherwise more than 10% of it (and 1,000 rows)
    changed since the last ANALYZE: analysed only if that was over ``min_age`` seconds ago, so
    a busy queue is not analysed every second.
    """
    st = staleness
    grown = st.live > max(1000, 2 * st.planned) or st.pages > max(
        GROWN_MIN_PAGES, 2 * st.planned_pages, 2 * analysed_pages
    )
    drifted = st.changed > max(1000, 0.1 * st.live) and (st.age is None or st.age > min_age)
    if not (grown or drifted):
        return None
    table = tx.engine.dialect.identifier_preparer.format_table(jobs_hot)
    # SKIP_LOCKED: when another worker is already analysing, that one is enough.
    tx.write_one(lambda c: c.exec_driver_sql(f"ANALYZE (SKIP_LOCKED) {table}"), op="analyze")
    log.info(
        "refreshed planner statistics of %s (%s: ~%d rows and %d pages, %.0f and %d at the last count, "
        "%d changed since)",
        table,
        "grown" if grown else "changed",
        st.live,
        st.pages,
        st.planned,
        st.planned_pages,
        st.changed,
    )
    return st.pages
