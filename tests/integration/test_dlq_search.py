"""The DLQ search (id, type, tags or error text contain the needle, any case) finds the same jobs
on every database, through the index migration 11 made (pg_trgm, FTS5 trigram), and stays right
as jobs are dead-lettered, edited, resurrected and purged."""

from __future__ import annotations

import sqlite3

from sqlalchemy import text

from chokaq.domain.states import Location
from chokaq.storage import Actor, Storage
from chokaq.storage.admin import AdminStore
from chokaq.storage.admin_types import JobEdit, JobFilter
from tests.api.helpers import make_dead

OPS = Actor("ops@example.com", "admin")


def found(admin: AdminStore, needle: str) -> set[str]:
    page = admin.list_jobs(Location.DLQ, JobFilter(search=needle), page_size=1000)
    assert page.total == len(page.items)
    return {j.id for j in page.items}


def test_search_finds_substrings_in_any_case_and_follows_the_moves(storage: Storage) -> None:
    admin = AdminStore(storage)
    smtp = make_dead(storage, 3, type="mail_v1", details='SMTPError: Upstream 421 Refused "relay"')
    other = make_dead(storage, 2, type="report_v2", details="ValueError: 100% of rows_x failed")
    every = set(smtp) | set(other)
    assert found(admin, "upstream 421") == set(smtp)
    assert found(admin, "UPSTREAM 421 refused") == set(smtp)
    assert found(admin, "ail_v") == set(smtp)  # type
    assert found(admin, smtp[1][3:15].lower()) == {smtp[1]}  # inside an id, any case
    assert found(admin, '"relay"') == set(smtp)  # quotes are text, not FTS syntax
    assert found(admin, "100% of rows_x") == set(other)  # LIKE wildcards are text too
    # Shorter than a trigram: read, not looked up. "Up" and not "42": ids are random ULIDs, whose
    # alphabet has no U, so the needle cannot match an id by chance ("42" did, once in a CI run).
    assert found(admin, "Up") == set(smtp)
    assert found(admin, "_") == every
    assert found(admin, "nowhere at all") == set()

    admin.edit_dlq(other[0], JobEdit(tags="tenant-Acme"), OPS)
    assert found(admin, "tenant-acme") == {other[0]}
    admin.resurrect(smtp[0], OPS)
    admin.purge_dlq(OPS, ids=[smtp[1]])
    assert found(admin, "upstream 421") == {smtp[2]}
    # Dead-lettered again: found again (a new row, a new index entry).
    again = make_dead(storage, 1, type="mail_v1", details="SMTPError: upstream 421 refused")
    assert found(admin, "upstream 421") == {smtp[2], *again}


def test_the_search_is_served_by_an_index(storage: Storage) -> None:
    make_dead(storage, 2, details="SMTPError: upstream 421 refused")
    with storage.engine.connect() as c:
        if storage.dialect == "postgresql":
            names = {
                r[0]
                for r in c.execute(
                    text("SELECT indexname FROM pg_indexes WHERE schemaname = 'chokaq' AND tablename = 'JobsDLQ'")
                )
            }
            assert {f"IX_JobsDLQ_Search{col}" for col in ("Id", "Type", "Tags", "ErrorDetails")} <= names
            c.execute(text("SET enable_seqscan = off"))  # two rows: make the planner show it can
            plan = "\n".join(
                r[0]
                for r in c.execute(
                    text(
                        'EXPLAIN SELECT count(*) FROM chokaq."JobsDLQ" '
                        "WHERE lower(\"ErrorDetails\") LIKE '%upstream 421%'"
                    )
                )
            )
            assert "IX_JobsDLQ_SearchErrorDetails" in plan
        else:
            plan = "\n".join(
                str(r[-1])
                for r in c.execute(
                    text(
                        'EXPLAIN QUERY PLAN SELECT count(*) FROM "JobsDLQ" WHERE "JobsDLQ".rowid IN '
                        '(SELECT rowid FROM "JobsDLQSearch" WHERE "JobsDLQSearch" MATCH \'"upstream"\')'
                    )
                )
            )
            assert "VIRTUAL TABLE INDEX" in plan


def test_sqlite_search_survives_vacuum(sqlite_url: str) -> None:
    """The FTS5 table is keyed on JobsDLQ's rowid, and SQLite documents that VACUUM may renumber the
    rowids of a table without an INTEGER PRIMARY KEY (JobsDLQ's key is text). An operator's VACUUM
    after a purge must not point the index at other jobs: search still finds exactly the right ones."""
    storage = Storage(sqlite_url)
    storage.upgrade()
    admin = AdminStore(storage)
    kept = make_dead(storage, 30, type="mail_v1", details="SMTPError: upstream 421 refused")
    other = make_dead(storage, 30, type="report_v2", details="ValueError: bad rows")
    admin.purge_dlq(OPS, ids=kept[::2] + other[1::2])  # gaps in both runs of rowids
    vacuum = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))  # as an operator's shell would
    vacuum.execute("VACUUM")
    vacuum.close()
    assert found(admin, "upstream 421") == set(kept[1::2])
    assert found(admin, "bad rows") == set(other[::2])
    more = make_dead(storage, 3, type="mail_v1", details="SMTPError: upstream 421 refused")
    assert found(admin, "upstream 421") == set(kept[1::2]) | set(more)
    storage.close()
