"""Running moves between tables inside a transaction, and the StatsSummary counters they add to."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Table, delete, insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import ColumnElement

from chokaq.storage.schema import stats_summary
from chokaq.storage.sqlfuncs import utcnow
from chokaq.storage.statements import MoveStatements, StatsCounter, bump_statement


def bump_stats(conn: Connection, column: StatsCounter, per_queue: Counter[str], sign: int = 1) -> None:
    """Add to one StatsSummary counter per queue, creating the row when it is missing."""
    bump = bump_statement(column)
    # Sorted: concurrent transactions lock counter rows in one order and cannot deadlock.
    for queue, n in sorted(per_queue.items()):
        if not n:
            continue
        params = {"stats_queue": queue, "stats_delta": sign * n}
        if conn.execute(bump, params).rowcount:
            continue
        try:
            with conn.begin_nested():
                conn.execute(
                    insert(stats_summary).values({"Queue": queue, column: sign * n, "LastActivityUtc": utcnow()})
                )
        except IntegrityError:
            conn.execute(bump, params)  # another transaction created it first


def move_rows(
    c: Connection,
    source: Table,
    where: ColumnElement[bool],
    target: Table,
    changes: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    stamps: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Delete matching rows from ``source`` and insert them into ``target``: the columns both
    tables have are copied, ``changes(row)`` overrides some, ``stamps`` are SQL expressions.

    DELETE ... RETURNING (OUTPUT DELETED.* on SQL Server) hands back exactly the rows this
    transaction removed, so a row that another transaction moved first is never copied.
    """
    rows = [dict(r._mapping) for r in c.execute(delete(source).where(where).returning(*source.c)).all()]
    if rows:
        shared = [col.name for col in target.c if col.name in source.c and col.name not in (stamps or {})]
        copy = insert(target).values(**(stamps or {}))
        if c.dialect.name == "mssql":
            # Typed multi-row VALUES instead of untyped fast_executemany (see enqueue_many).
            copy = copy.returning(target.c.Id)
        c.execute(copy, [{**{k: r[k] for k in shared}, **(changes(r) if changes else {})} for r in rows])
    return rows


def move_in_db(c: Connection, move: MoveStatements, params: dict[str, Any]) -> list[tuple[str, str]]:
    """Move rows like :func:`move_rows`, but without carrying them through Python: copy them
    under a row lock, then delete them (the portable form of :class:`MoveStatements`).

    The worker's hot path uses this: shipping every payload out and back in cost more client
    time than the rest of a job's bookkeeping. Returns ``(Id, Queue)`` of each moved row.
    """
    copied = c.execute(move.copy, params).rowcount
    moved = [(r[0], r[1]) for r in c.execute(move.remove, params)]
    if copied != len(moved):
        # Rolls the whole transaction back: nothing is half-moved.
        raise RuntimeError(f"move: copied {copied} rows but deleted {len(moved)}")
    return moved


def run_move(c: Connection, move: MoveStatements, params: dict[str, Any]) -> list[tuple[str, str]]:
    """A move and its counter on ``c``, in the form its dialect runs fastest: PostgreSQL's one
    statement, SQL Server's one batch, or copy, delete and bump. Returns ``(Id, Queue)`` pairs."""
    if c.dialect.name == "postgresql":
        return [(r[0], r[1]) for r in c.execute(move.single, params)]
    if c.dialect.name == "mssql":
        return [(r[0], r[1]) for r in c.execute(move.batch, params)]
    moved = move_in_db(c, move, params)
    bump_stats(c, move.counter, Counter(queue for _, queue in moved))
    return moved


def runs_alone(dialect: str) -> bool:
    """Whether :func:`run_move` is one statement (or batch) that needs no transaction around it."""
    return dialect in ("postgresql", "mssql")
