"""Running moves between tables inside a transaction, and the StatsSummary counters they add to."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Table, delete, insert, null
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import ColumnElement

from chokaq.storage.dialects import profile_of
from chokaq.storage.executor import Executor
from chokaq.storage.nulls import by_nulls
from chokaq.storage.schema import stats_summary
from chokaq.storage.sqlfuncs import utcnow
from chokaq.storage.statements import MoveStatements, StatsCounter, bump_statement, counter_insert_statement


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
        copies = [{**{k: r[k] for k in shared}, **(changes(r) if changes else {})} for r in rows]
        # Rows with the same columns None share a statement that writes those as NULL (nulls.py).
        for nulls, group in by_nulls(copies):
            values = {**(stamps or {}), **{name: null() for name in nulls}}
            copy = profile_of(c.dialect).typed_insert_many(insert(target).values(**values), target.c.Id)
            c.execute(copy, group)
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
    """A move and its counter on ``c``, in the form its database runs fastest (see
    :meth:`Profile.run_move`). Returns ``(Id, Queue)`` pairs."""
    return profile_of(c.dialect).run_move(c, move, params)


def run_move_on_driver(executor: Executor, move: MoveStatements, params: dict[str, Any]) -> list[tuple[str, str]]:
    """SQLite: :func:`move_in_db` and :func:`bump_stats` in one transaction, straight through the
    driver (see executor.py). Under BEGIN IMMEDIATE no other writer can create a counter row between
    the bump and its insert, so the insert needs no savepoint."""
    with executor.transaction(sending=lambda: None) as tx:
        copied = tx.run(move.copy, params)[1]
        moved = [(r[0], r[1]) for r in tx.run(move.remove, params)[0]]
        if copied != len(moved):
            # Rolls the whole transaction back: nothing is half-moved.
            raise RuntimeError(f"move: copied {copied} rows but deleted {len(moved)}")
        for queue, n in sorted(Counter(q for _, q in moved).items()):
            counted = {"stats_queue": queue, "stats_delta": n}
            if not tx.run(bump_statement(move.counter), counted)[1]:
                tx.run(counter_insert_statement(move.counter), counted)
    return moved
