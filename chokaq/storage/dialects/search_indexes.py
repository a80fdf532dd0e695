"""The indexes that serve the DLQ search (``?search=``: id, type, tags or error text, a substring,
any case), per database (docs/admin-figures.md, "Search").

PostgreSQL: pg_trgm GIN indexes on ``lower()`` of the four columns, which serve the same
``lower(col) LIKE '%needle%'`` every database runs. The extension is trusted (PostgreSQL 13+): a
role that may create objects in the database may create it. Where it cannot be created the
migration says so in the log and leaves the indexes out: search then reads the whole DLQ as before.

SQLite: an FTS5 table with the trigram tokenizer (SQLite 3.34+) over the same columns, kept by
triggers on JobsDLQ; a needle of three or more characters is looked up there (a trigram phrase
matches the same substrings, any case).

SQL Server: no index (full-text search matches words, not substrings): search scans the DLQ.
"""

from __future__ import annotations

import logging

from sqlalchemy import Connection, column, literal_column, select, table, text
from sqlalchemy.sql.elements import ColumnElement

log = logging.getLogger("chokaq.storage")

SEARCHED = ("Id", "Type", "Tags", "ErrorDetails")
FTS_TABLE = "JobsDLQSearch"
# The trigram tokenizer finds phrases of at least three characters; shorter needles use LIKE.
MIN_INDEXED_NEEDLE = 3


def postgres_trigram_indexes() -> list[str]:
    return [
        f'CREATE INDEX IF NOT EXISTS "IX_JobsDLQ_Search{col}" ON "chokaq"."JobsDLQ" '
        f'USING gin (lower("{col}") gin_trgm_ops)'
        for col in SEARCHED
    ]


def create_postgres_search(conn: Connection) -> None:
    try:
        with conn.begin_nested():
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_trgm"))
    except Exception as exc:  # not installed on the server, or no privilege: search still works
        log.warning(
            "pg_trgm could not be created (%s): the DLQ search will read the whole DLQ; "
            "create the extension and run `chokaq db upgrade` again (docs/admin-figures.md)",
            str(exc).splitlines()[0],
        )
        return
    for ddl in postgres_trigram_indexes():
        conn.execute(text(ddl))


def sqlite_fts() -> list[str]:
    cols = ", ".join(f'"{c}"' for c in SEARCHED)
    new = ", ".join(f'new."{c}"' for c in SEARCHED)
    old = ", ".join(f'old."{c}"' for c in SEARCHED)
    forget = f'INSERT INTO "{FTS_TABLE}"("{FTS_TABLE}", rowid, {cols}) VALUES (\'delete\', old.rowid, {old});'
    learn = f'INSERT INTO "{FTS_TABLE}"(rowid, {cols}) VALUES (new.rowid, {new});'
    return [
        f"CREATE VIRTUAL TABLE IF NOT EXISTS \"{FTS_TABLE}\" USING fts5({cols}, content='JobsDLQ', "
        "content_rowid=rowid, tokenize='trigram')",
        f'CREATE TRIGGER IF NOT EXISTS "JobsDLQ_SearchInsert" AFTER INSERT ON "JobsDLQ" BEGIN {learn} END',
        f'CREATE TRIGGER IF NOT EXISTS "JobsDLQ_SearchDelete" AFTER DELETE ON "JobsDLQ" BEGIN {forget} END',
        f'CREATE TRIGGER IF NOT EXISTS "JobsDLQ_SearchUpdate" AFTER UPDATE ON "JobsDLQ" BEGIN {forget} {learn} END',
    ]


def create_sqlite_search(conn: Connection) -> None:
    for ddl in sqlite_fts():
        conn.execute(text(ddl))
    # Rows dead-lettered before this migration.
    conn.execute(text(f'INSERT INTO "{FTS_TABLE}"("{FTS_TABLE}") VALUES (\'rebuild\')'))


def fts_search(needle: str) -> ColumnElement[bool] | None:
    """SQLite: JobsDLQ rows whose searched columns contain ``needle`` (any case), looked up in the
    trigram index; None for a needle too short for it."""
    if len(needle) < MIN_INDEXED_NEEDLE:
        return None
    phrase = '"' + needle.replace('"', '""') + '"'  # one FTS5 phrase: the needle as it is
    fts = table(FTS_TABLE, column("rowid"))
    hits = select(fts.c.rowid).where(text(f'"{FTS_TABLE}" MATCH :dlq_search').bindparams(dlq_search=phrase))
    return literal_column('"JobsDLQ".rowid').in_(hits)
