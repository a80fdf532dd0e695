"""Statement shapes that only SQL Server gets: the claim as an updatable CTE, fenced moves that join
one lease rowset, and a move with its counter as one round trip.

PostgreSQL and SQLite keep their own forms (in statements/); these exist because SQL Server's locking
and its ODBC driver reward different shapes:

- Claimers that lock rows through different indexes can deadlock (1205). Every claim reads one index,
  :data:`CLAIM_INDEX`, one queue at a time (:class:`ClaimPick`), then its picked rows by key, all
  with READPAST: one lock order for every claim (statements/claim.py, docs/sqlserver.md).
- ``Id IN (...) OR Id IN (...)`` over OPENJSON groups may be planned as a scan; a join with one
  ``OPENJSON ... WITH (Id, Attempt)`` rowset is a primary-key seek per lease.
- Every extra statement is a network round trip; a move, its delete and its counter travel as one
  T-SQL batch in its own transaction (the PostgreSQL twin is one statement of writable CTEs).
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

from sqlalchemy import BigInteger, Integer, Select, Table, UnicodeText, bindparam, column, text
from sqlalchemy.dialects import mssql
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement, ColumnElement
from sqlalchemy.sql.selectable import Subquery
from sqlalchemy.sql.visitors import InternalTraversal

from chokaq.storage.schema import stats_summary
from chokaq.storage.sqlfuncs import ListParam, mssql_type_and_collation

_DIALECT = mssql.dialect()  # type: ignore[no-untyped-call]

#: The one index every claim reads (Queue, Priority DESC, ScheduledAtUtc, CreatedAtUtc; filtered
#: Status = 0; Type included on SQL Server): each claim locks the keys of this index first, then the
#: clustered rows it picked, so no two claimers hold locks on one row through different indexes.
CLAIM_INDEX = "IX_JobsHot_Fetch"
CLAIM_READ_HINT = f"WITH (INDEX([{CLAIM_INDEX}]), UPDLOCK, READPAST, ROWLOCK)"


def mssql_type(col: ColumnElement[Any], *, collation: bool = True) -> str:
    """The column's SQL Server type as DDL renders it. ``collation=False`` drops a COLLATE clause,
    for CAST and OPENJSON's WITH, which take none (the column's own collation then wins the
    comparison). A table variable keeps it: two different column collations cannot be compared."""
    # As a column definition: chokaq's key types render their collation only there.
    sqltype = str(_DIALECT.type_compiler_instance.process(col.type, type_expression=col))
    return sqltype if collation else re.sub(r"\s+COLLATE\s+\S+", "", sqltype)


def lease_rowset(id_col: ColumnElement[Any], name: str = "lease", durations: bool = False) -> Subquery:
    """``(SELECT Id, Attempt FROM OPENJSON(?) WITH (...)) AS lease``: a worker's leases as one
    typed rowset, bound as a JSON array of ``[id, attempt]`` pairs (see ``fence_params``).

    ``durations``: a third column, ``DurationMs BIGINT '$[2]'``, each completed job's run time
    beside its lease: OPENJSON parses the document once for the statement, where a lookup by id
    (``JSON_VALUE(?, CONCAT('$."', Id, '"'))``) parsed all of it again for every row."""
    sqltype, collate = mssql_type_and_collation(_DIALECT, id_col.type)
    extra = ", [DurationMs]" if durations else ""
    extra_type = ", [DurationMs] BIGINT '$[2]'" if durations else ""
    # OPENJSON's WITH takes no COLLATE; the select list does (Msg 468 against a BIN2 key otherwise).
    sql = (
        f"SELECT [Id]{collate} AS [Id], [Attempt]{extra} FROM OPENJSON(CAST(:fence_leases AS NVARCHAR(max))) "
        f"WITH ([Id] {sqltype} '$[0]', [Attempt] INT '$[1]'{extra_type})"
    )
    columns = [column("Id", id_col.type), column("Attempt", Integer())]
    if durations:
        columns.append(column("DurationMs", BigInteger()))
    return text(sql).bindparams(bindparam("fence_leases", type_=UnicodeText())).columns(*columns).subquery(name)


def name_rowset(param: str, name_col: ColumnElement[Any], name: str = "ql") -> Subquery:
    """``(SELECT CAST([value] AS <type>) COLLATE ... AS [Name] FROM OPENJSON(?)) AS ql``: a list of
    names bound as one parameter (one statement text for any number of names), typed as
    ``name_col`` so comparing it with that column is a seek."""
    sqltype, collate = mssql_type_and_collation(_DIALECT, name_col.type)
    sql = f"SELECT CAST([value] AS {sqltype}){collate} AS [Name] FROM OPENJSON(CAST(:{param} AS NVARCHAR(max)))"
    return (
        text(sql)
        .bindparams(bindparam(param, type_=ListParam(name_col.type)))
        .columns(column("Name", name_col.type))
        .subquery(name)
    )


class CteUpdate(Executable, ClauseElement):
    """``WITH [pick AS (...),] c AS (<select>) UPDATE c SET ... OUTPUT inserted....`` (SQL Server).

    ``sets`` are expressions over the CTE's columns (a ``table("c", ...)``); ``outputs`` are column
    names of the updated table.
    """

    # Cached like any SQLAlchemy statement: the key is the structure of these parts.
    _traverse_internals = [
        ("select", InternalTraversal.dp_clauseelement),
        ("set_names", InternalTraversal.dp_string_list),
        ("set_values", InternalTraversal.dp_clauseelement_list),
        ("outputs", InternalTraversal.dp_string_list),
        ("pick", InternalTraversal.dp_clauseelement),
    ]

    def __init__(
        self,
        select: Select[Any],
        sets: dict[str, ColumnElement[Any]],
        outputs: list[str],
        pick: ClauseElement | None = None,
    ) -> None:
        self.select = select
        self.set_names = list(sets)
        self.set_values = list(sets.values())
        self.outputs = outputs
        self.pick = pick


def _nested(compiler: SQLCompiler, element: ClauseElement, **kw: Any) -> str:
    """``element`` compiled as a part of the statement that returns no result columns of its own
    (the compiler takes each SELECT it meets outside a statement for one that does)."""
    saved = list(compiler._result_columns)
    sql = str(compiler.process(element, **kw))
    compiler._result_columns[:] = saved
    return sql


@compiles(CteUpdate, "mssql")
def _cte_update(element: CteUpdate, compiler: SQLCompiler, **kw: Any) -> str:
    q = compiler.preparer.quote
    ctes = []
    if element.pick is not None:
        ctes.append(f"pick AS \n({_nested(compiler, element.pick, **kw)})")
    ctes.append(f"c AS \n({compiler.process(element.select, **kw)})")
    pairs = zip(element.set_names, element.set_values, strict=True)
    sets = ", ".join(f"{q(name)}={compiler.process(expr, **kw)}" for name, expr in pairs)
    outputs = ", ".join(f"inserted.{q(name)}" for name in element.outputs)
    return f"WITH {', '.join(ctes)}\nUPDATE c SET {sets} OUTPUT {outputs}"


@compiles(CteUpdate)
def _cte_update_other(element: CteUpdate, compiler: SQLCompiler, **kw: Any) -> NoReturn:
    raise NotImplementedError("CteUpdate is SQL Server's claim shape")


class ClaimPick(Executable, ClauseElement):
    """``SELECT TOP (n) j.<columns> FROM (<queues>) AS q CROSS APPLY (<branch>) AS j ORDER BY <order>``.

    ``queues``: a SELECT of one column, ``Name``: the queues to claim from. ``branch``: one queue's
    due jobs, read from :data:`CLAIM_INDEX` in claim order (its ``Queue`` compared with ``q.[Name]``,
    a seek). ``columns``: the branch's columns the pick returns; ``order``: its claim order.
    """

    _traverse_internals = [
        ("queues", InternalTraversal.dp_clauseelement),
        ("branch", InternalTraversal.dp_clauseelement),
        ("columns", InternalTraversal.dp_string_list),
        ("order", InternalTraversal.dp_string_list),
        ("limit", InternalTraversal.dp_plain_obj),
    ]

    def __init__(self, queues: Select[Any], branch: Select[Any], columns: list[str], order: list[str], limit: int):
        self.queues = queues
        self.branch = branch
        self.columns = columns
        self.order = order
        self.limit = limit


@compiles(ClaimPick, "mssql")
def _claim_pick(element: ClaimPick, compiler: SQLCompiler, **kw: Any) -> str:
    q = compiler.preparer.quote
    cols = ", ".join(f"j.{q(c)}" for c in element.columns)
    order = ", ".join(f"j.{o}" for o in element.order)
    queues = _nested(compiler, element.queues, **kw)
    branch = _nested(compiler, element.branch, **kw)
    return f"SELECT TOP {int(element.limit)} {cols}\nFROM ({queues}) AS q CROSS APPLY ({branch}) AS j\nORDER BY {order}"


@compiles(ClaimPick)
def _claim_pick_other(element: ClaimPick, compiler: SQLCompiler, **kw: Any) -> NoReturn:
    raise NotImplementedError("ClaimPick is SQL Server's claim shape")


class MoveBatch(Executable, ClauseElement):
    """Copy rows into ``target``, delete them from ``source`` and add them to a StatsSummary counter:
    one T-SQL batch, one transaction, one round trip. Returns ``(Id, Queue)`` of each moved row.

    The delete goes by the ids the copy recorded (``@moved``), under the copy's UPDLOCK, so it
    removes exactly the rows copied. Counters come last, as in every chokaq transaction.
    """

    _traverse_internals = [
        ("source", InternalTraversal.dp_clauseelement),
        ("target", InternalTraversal.dp_clauseelement),
        ("names", InternalTraversal.dp_string_list),
        ("select", InternalTraversal.dp_clauseelement),
        ("counter", InternalTraversal.dp_string),
    ]

    def __init__(self, source: Table, target: Table, names: list[str], select: Select[Any], counter: str) -> None:
        self.source = source
        self.target = target
        self.names = names
        self.select = select
        self.counter = counter


@compiles(MoveBatch, "mssql")
def _move_batch(element: MoveBatch, compiler: SQLCompiler, **kw: Any) -> str:
    prep = compiler.preparer
    source = prep.format_table(element.source)
    target = prep.format_table(element.target)
    stats = prep.format_table(stats_summary)
    cols = ", ".join(prep.quote(n) for n in element.names)
    counter = prep.quote(element.counter)
    id_type = mssql_type(element.source.c.Id)
    queue_type = mssql_type(element.source.c.Queue)
    # SET options inside a parameterised batch (sp_executesql / sp_prepexec) revert when it ends;
    # they are reset explicitly as well, for a driver that sends the batch as plain text.
    return (
        "SET NOCOUNT ON;\n"
        "SET XACT_ABORT ON;\n"
        f"DECLARE @moved TABLE ([Id] {id_type} PRIMARY KEY, [Queue] {queue_type});\n"
        "BEGIN TRANSACTION;\n"
        f"INSERT INTO {target} ({cols}) OUTPUT inserted.[Id], inserted.[Queue] INTO @moved\n"
        f"{compiler.process(element.select, **kw)};\n"
        f"DELETE h FROM {source} AS h JOIN @moved AS m ON m.[Id] = h.[Id];\n"
        f"INSERT INTO {stats} ([Queue], [LastActivityUtc]) SELECT DISTINCT m.[Queue], SYSUTCDATETIME() "
        f"FROM @moved AS m WHERE NOT EXISTS (SELECT 1 FROM {stats} AS s WITH (UPDLOCK, HOLDLOCK) "
        "WHERE s.[Queue] = m.[Queue]);\n"
        f"UPDATE s SET s.{counter} = s.{counter} + m.[n], s.[LastActivityUtc] = SYSUTCDATETIME() "
        f"FROM {stats} AS s JOIN (SELECT [Queue], COUNT(*) AS [n] FROM @moved GROUP BY [Queue]) AS m "
        "ON m.[Queue] = s.[Queue];\n"
        "COMMIT TRANSACTION;\n"
        "SET XACT_ABORT OFF;\n"
        "SET NOCOUNT OFF;\n"
        "SELECT [Id], [Queue] FROM @moved"
    )


@compiles(MoveBatch)
def _move_batch_other(element: MoveBatch, compiler: SQLCompiler, **kw: Any) -> NoReturn:
    raise NotImplementedError("MoveBatch is SQL Server's move shape")
