"""The worker's moves as PostgreSQL compiles them: one cached statement, counters in one order."""

from __future__ import annotations

from sqlalchemy.dialects import postgresql

from chokaq.storage.statements import complete_statements, fail_statements

PG = postgresql.psycopg.dialect()


def test_the_single_statement_move_is_cacheable() -> None:
    # Without a cache key SQLAlchemy compiles the statement on every call, which cost more than
    # running it; SQLAlchemy's own PostgreSQL INSERT construct has none.
    for move in (complete_statements(1), complete_statements(3), fail_statements()):
        assert move.single._generate_cache_key() is not None


def test_the_single_statement_move_copies_counts_and_returns_in_one() -> None:
    sql = " ".join(str(complete_statements(1).single.compile(dialect=PG)).split())
    assert sql.startswith('WITH moved AS (DELETE FROM chokaq."JobsHot" WHERE')
    assert 'INSERT INTO chokaq."JobsArchive"' in sql and "FROM moved" in sql
    # Counter rows are locked in queue order, so concurrent moves cannot deadlock on them.
    assert 'GROUP BY moved."Queue" ORDER BY moved."Queue" ON CONFLICT ("Queue") DO UPDATE SET' in sql
    assert '"SucceededTotal" = "StatsSummary"."SucceededTotal" + excluded."SucceededTotal"' in sql
    # The durations JSON is parsed once per statement (an InitPlan), not once per row.
    assert '((SELECT CAST(%(durations)s::VARCHAR AS JSONB)) ->> moved."Id")' in sql
    fail = " ".join(str(fail_statements().single.compile(dialect=PG)).split())
    assert 'INSERT INTO chokaq."JobsDLQ"' in fail and '"FailedTotal" = "StatsSummary"."FailedTotal" +' in fail
