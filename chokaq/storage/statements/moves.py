"""Moves between tables (JobsHot -> JobsArchive or JobsDLQ) as statements that never carry a row
through Python, in the three forms :meth:`Storage.move` runs: portable, PostgreSQL, SQL Server."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from sqlalchemy import (
    Insert,
    Select,
    String,
    Table,
    UnicodeText,
    bindparam,
    cast,
    delete,
    func,
    insert,
    literal_column,
    null,
    select,
)
from sqlalchemy.sql.dml import ReturningDelete
from sqlalchemy.sql.elements import ColumnElement

from chokaq.domain.states import FailureReason
from chokaq.storage.dialects.sqlserver_shapes import MoveBatch
from chokaq.storage.schema import jobs_archive, jobs_dlq, jobs_hot, stats_summary
from chokaq.storage.sqlfuncs import lookup_int, row_lock, utcnow
from chokaq.storage.statements.columns import Columns
from chokaq.storage.statements.counters import FAILED, SUCCEEDED, StatsCounter
from chokaq.storage.statements.fence import fence, lease
from chokaq.storage.statements.leases import notes_values
from chokaq.storage.statements.status import PROCESSING

# ``values(columns)``: SQL expressions over the source row's ``columns`` for the target columns
# that the source lacks or that change.
SourceValues: TypeAlias = Callable[[Columns], dict[str, ColumnElement[Any]]]


@dataclass(frozen=True)
class MoveStatements:
    """One move between tables, as :meth:`Storage.move` runs it.

    ``copy`` and ``remove`` are two statements run in one transaction with the counter bumped
    after them: the portable form, for SQLite. ``single`` is the same move and its counter as one
    PostgreSQL statement (writable CTEs); run without BEGIN and COMMIT it is one round trip instead
    of five. ``batch`` is SQL Server's one round trip: a T-SQL batch in its own transaction.
    """

    copy: Insert
    remove: ReturningDelete[Any]
    single: Select[Any]
    counter: StatsCounter
    batch: MoveBatch


def move_statements(
    source: Table, where: ColumnElement[bool], target: Table, values: SourceValues, counter: StatsCounter
) -> MoveStatements:
    """``values(columns)`` gives SQL expressions, over the source row's ``columns``, for target
    columns that the source lacks or that change. ``counter`` is the StatsSummary column to add
    the moved rows to."""
    changed = values(source.c)
    names = [col.name for col in target.c if col.name in changed or col.name in source.c]

    def shaped(columns: Columns) -> list[ColumnElement[Any]]:
        extra = values(columns)
        return [extra[n] if n in extra else columns[n] for n in names]

    # The lock keeps a concurrent move (the sweep, an operator) from taking a row between the
    # copy and the delete; without it a job could land in two tables.
    copy = insert(target).from_select(names, row_lock(select(*shaped(source.c)).where(where), source))
    # SQLAlchemy keeps rowcount for UPDATE and DELETE only unless asked.
    copy = copy.execution_options(preserve_rowcount=True)
    remove = delete(source).where(where).returning(source.c.Id, source.c.Queue)

    # PostgreSQL: DELETE ... RETURNING takes exactly the rows this statement removed (a row that
    # another transaction moved first is skipped), and the copy and the counter read those rows.
    moved = delete(source).where(where).returning(*source.c).cte("moved")
    copied = insert(target).from_select(names, select(*shaped(moved.c))).cte("copied")
    # Sorted by queue: concurrent moves then lock counter rows in one order and cannot deadlock.
    # ON CONFLICT goes in as fixed text after the SELECT: SQLAlchemy never caches its PostgreSQL
    # INSERT construct, and compiling this statement on every call cost more than running it.
    per_queue = (
        select(moved.c.Queue, func.count(), utcnow())
        .group_by(moved.c.Queue)
        .order_by(moved.c.Queue)
        .suffix_with(
            f'ON CONFLICT ("Queue") DO UPDATE SET "{counter}" = "StatsSummary"."{counter}" + excluded."{counter}", '
            '"LastActivityUtc" = excluded."LastActivityUtc"',
            dialect="postgresql",
        )
    )
    upsert = insert(stats_summary).from_select(["Queue", counter, "LastActivityUtc"], per_queue)
    single = select(moved.c.Id, moved.c.Queue).add_cte(copied, upsert.cte("counted"))
    batch = MoveBatch(source, target, names, row_lock(select(*shaped(source.c)).where(where), source), counter)
    return MoveStatements(copy, remove, single, counter, batch)


@functools.lru_cache(maxsize=32)
def complete_statements(groups: int, logs: bool = False, progress: bool = False) -> MoveStatements:
    """Processing -> JobsArchive for a worker's leases, each with its duration (``durations``), and
    with ``logs`` / ``progress`` the new values in ``job_logs`` / ``job_progress`` of jobs that have any."""

    def values(columns: Columns) -> dict[str, ColumnElement[Any]]:
        # SQL Server (groups 0): a column of the lease rowset; elsewhere a lookup in one JSON object.
        duration = (
            lease(True).c.DurationMs
            if groups == 0
            else lookup_int(columns.Id, bindparam("durations", type_=UnicodeText()))
        )
        return {"FinishedAtUtc": utcnow(), "DurationMs": duration, **notes_values(columns, logs, progress, many=True)}

    return move_statements(jobs_hot, fence(groups, PROCESSING, groups == 0), jobs_archive, values, SUCCEEDED)


@functools.lru_cache(maxsize=32)
def fail_statements(
    groups: int = 1, details: bool = True, history: bool = False, logs: bool = False, progress: bool = False
) -> MoveStatements:
    """Processing -> JobsDLQ for a worker's leases, with one reason (and details, if any); with
    ``history``, the attempt history becomes ``attempts`` (the failed attempt added by the worker);
    with ``logs`` and ``progress``, the job's logs and progress become those parameters."""

    def values(columns: Columns) -> dict[str, ColumnElement[Any]]:
        values: dict[str, ColumnElement[Any]] = {
            "FailedAtUtc": utcnow(),
            "FailureReason": bindparam("failure_reason", type_=jobs_dlq.c.FailureReason.type),
            # No details: NULL in the text, not a NULL parameter (see leases.release_statement).
            "ErrorDetails": bindparam("error_details", type_=jobs_dlq.c.ErrorDetails.type) if details else null(),
        }
        if history:
            values["Attempts"] = bindparam("attempts", type_=jobs_dlq.c.Attempts.type)
        values.update(notes_values(columns, logs, progress, many=False))
        return values

    return move_statements(jobs_hot, fence(groups, PROCESSING), jobs_dlq, values, FAILED)


def zombie_statements(where: ColumnElement[bool]) -> MoveStatements:
    """Processing -> DLQ for jobs whose heartbeat expired, moved inside the database."""

    def values(columns: Columns) -> dict[str, ColumnElement[Any]]:
        def text_of(expr: ColumnElement[Any], default: str) -> ColumnElement[Any]:
            return func.coalesce(expr, literal_column(f"'{default}'", String))

        # Literal text, not parameters: SQL Server would have to guess the type of a bound
        # operand of "+". Concatenation renders as + on SQL Server and || elsewhere.
        details = (
            literal_column("'Zombie detected: heartbeat expired (last heartbeat '", String)
            + text_of(cast(columns.HeartbeatUtc, String(40)), "never")
            + literal_column("' UTC, worker '", String)
            + text_of(columns.WorkerId, "unknown")
            + literal_column("', attempt '", String)
            + cast(columns.AttemptCount, String(12))
            + literal_column("')'", String)
        )
        return {
            "FailedAtUtc": utcnow(),
            "FailureReason": literal_column(str(int(FailureReason.ZOMBIE))),
            "ErrorDetails": details,
        }

    return move_statements(jobs_hot, where, jobs_dlq, values, FAILED)
