"""What a database profile answers: the one interface through which storage code asks about the
database it runs on, instead of branching on the dialect's name.

Each supported database has one profile module beside this one (``postgres``, ``sqlserver``,
``sqlite``), the single home of everything chokaq does differently there. The defaults below are
what the SQL standard and SQLAlchemy's portable forms give; a profile overrides what its database
does otherwise.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import Column, Connection, Engine, Table, literal, text
from sqlalchemy.engine import URL, Dialect
from sqlalchemy.sql.elements import ColumnElement

from chokaq.storage.schema import SCHEMA, UtcTime

if TYPE_CHECKING:
    from chokaq.storage.statements import MoveStatements


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """The settings an engine is built with (Storage.PoolSize, CommandTimeout, ConnectTimeout,
    StatementTimeout); each profile uses those its database has."""

    pool_size: int = 10
    echo: bool = False
    command_timeout: int = 0
    connect_timeout: float = 10.0
    statement_timeout: float = 0.0


class Profile:
    """One database's differences. Stateless: one instance per database, shared."""

    name: ClassVar[str]  # SQLAlchemy's dialect name
    label: ClassVar[str]  # the name the docs and the CLI's messages use
    extra: ClassVar[str]  # the pip extra that installs its driver

    # ------------------------------------------------------------------ capabilities
    #: LISTEN/NOTIFY wake-ups between processes.
    listen_notify: ClassVar[bool] = False
    #: Planner statistics chokaq keeps current itself (Storage.refresh_statistics).
    statistics: ClassVar[bool] = False
    #: An asynchronous driver for the worker's claims and completions on its event loop.
    loop_transport: ClassVar[bool] = False
    #: A list parameter binds as a native array (else as one JSON text).
    list_arrays: ClassVar[bool] = False
    #: Tables live in chokaq's schema (SQLite has none: the schema is translated away).
    schemas: ClassVar[bool] = True
    #: A connection that can break under a sent statement, so a reply can be lost. An embedded
    #: database has no connection to lose: a failure there always rolled back.
    lost_replies: ClassVar[bool] = True
    #: A single writing statement may run alone in autocommit; else every write opens its own
    #: transaction (SQLite's BEGIN IMMEDIATE, which is its write lock).
    autocommit_statements: ClassVar[bool] = True
    #: A finishing move is one statement or batch that carries its own counter bump.
    moves_alone: ClassVar[bool] = False
    #: Fences name their leases as one JSON rowset (else one id list per attempt).
    lease_rowset: ClassVar[bool] = False
    #: The hot-path and sweep statements can be printed as a script (`chokaq db script --queries`).
    queries_script: ClassVar[bool] = True
    #: The driver returns rows for a statement with RETURNING only when asked to fetch them.
    fetch_returning: ClassVar[bool] = False
    #: The driver prepares statements on the server when asked (``cursor.execute(prepare=)``).
    prepared_statements: ClassVar[bool] = False
    #: Rows and parameters one multi-row INSERT may carry (a bulk enqueue splits its rows so).
    insert_rows_max: ClassVar[int] = 1000
    insert_params_max: ClassVar[int] = 32_000
    #: Rows one batch statement may name (claims, sweep moves, purges), so that its locks stay
    #: under the database's lock escalation; None: no such limit (PostgreSQL and SQLite never
    #: escalate). Callers loop over batches of :meth:`statement_rows`.
    max_rows_per_statement: ClassVar[int | None] = None
    #: What ends one statement in a plain script.
    script_separator: ClassVar[str] = ";\n"

    # ------------------------------------------------------------------ connections
    def build_engine(self, url: URL, options: EngineOptions) -> Engine:
        raise NotImplementedError

    def autocommit_twin(self, engine: Engine) -> Engine | None:
        """A second pool whose connections stay in autocommit, for single statements (None: the
        shared pool switches per statement at no cost)."""
        return None

    # ------------------------------------------------------------------ errors
    def transient(self, exc: BaseException) -> bool:
        """Whether this driver's error ``exc`` (unwrapped) may pass when the transaction is replayed."""
        return False

    def never_transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` must not be replayed even where it looks like a dropped link."""
        return False

    # ------------------------------------------------------------------ statements
    def ddl_dialect(self) -> Dialect:
        """The dialect the plain DDL script is compiled for (`chokaq db script`)."""
        raise NotImplementedError

    def scripting_dialect(self) -> Dialect:
        """The dialect, as production's first connection initialises it, with named parameters:
        for the printed hot-path statements (`chokaq db script --queries`)."""
        raise NotImplementedError

    def claim_statement(
        self,
        queue_names: list[str],
        limited: bool,
        limit: int,
        start: bool,
        zombie_retry: bool,
        params: dict[str, Any],
        breaker: bool = False,
    ) -> Any:
        """The claim for ``queue_names`` (empty: every queue), its queue parameters added to ``params``."""
        from chokaq.storage import statements as st

        if queue_names:
            params["claim_queues"] = list(queue_names)
        return st.claim_statement(bool(queue_names), limited, limit, start, zombie_retry, breaker)

    def statement_rows(self, size: int) -> int:
        """``size`` (a batch setting: CleanupBatchSize, a claim's limit) as this database's batch
        statements may take it: at most :attr:`max_rows_per_statement`."""
        cap = self.max_rows_per_statement
        return size if cap is None else max(1, min(size, cap))

    def probe_ids_statement(self, limit: int, by_queue: bool) -> Any:
        """A half-open breaker's probes: the ids of up to ``limit`` due jobs of ``breaker_type``
        (of ``probe_queues`` when ``by_queue``), locked and in claim order."""
        from chokaq.storage.statements import breakers

        return breakers.probe_ids_statement(limit, by_queue)

    def probe_claim_statement(self) -> Any:
        """Those ids (``probe_ids``) Pending -> Fetched for ``claim_worker``."""
        from chokaq.storage.statements import breakers

        return breakers.probe_claim_statement()

    def alone_move(self, move: MoveStatements) -> Any:
        """The statement (or batch) of a move that runs alone (see :attr:`moves_alone`)."""
        raise NotImplementedError

    def run_move(self, c: Connection, move: MoveStatements, params: dict[str, Any]) -> list[tuple[str, str]]:
        """A move and its counter on ``c``, in the form this database runs fastest: one statement
        or batch where :attr:`moves_alone`, else copy, delete and bump. Returns ``(Id, Queue)`` pairs."""
        if self.moves_alone:
            return [(r[0], r[1]) for r in c.execute(self.alone_move(move), params)]
        from chokaq.storage.moving import bump_stats, move_in_db

        moved = move_in_db(c, move, params)
        bump_stats(c, move.counter, Counter(queue for _, queue in moved))
        return moved

    def exact_time(self, value: datetime) -> Any:
        """``value`` as a parameter compared with a time column to the microsecond (a preview's
        bound: a job inside it must not fall out by rounding)."""
        return literal(value, UtcTime)

    def input_size(self, dbtype: Any, type_: Any) -> tuple[Any, Any, Any]:
        """One ``setinputsizes`` entry (BindTyping.SETINPUTSIZES drivers: pyodbc), as the pyodbc
        connector's do_set_input_sizes builds it, for a parameter of SQLAlchemy type ``type_``."""
        return dbtype if isinstance(dbtype, tuple) else (dbtype, None, None)

    def typed_insert_many(self, stmt: Any, id_column: Column[Any]) -> Any:
        """A multi-row INSERT as this driver sends its parameters typed."""
        return stmt

    def upsert_statement(self, table: Table, values: Mapping[str, Any], keep: Collection[str] = ()) -> Any:
        """One statement: insert ``values`` as a row of ``table``, or, where a row with its primary
        key exists, set that row's columns to them, all but ``keep`` (and the key). Atomic against a
        concurrent writer of the same key: no window between a miss and the insert."""
        raise NotImplementedError

    def notify(self, conn: Connection, queue: str) -> None:
        """Inside a transaction storing new work on ``queue``: wake other processes at commit."""

    def notify_statement(self) -> Any:
        """:meth:`notify` as one statement taking the queue as ``:queue`` (for a transport that runs
        statements, not a Connection: loop_enqueue.py); None where there is no NOTIFY."""
        return None

    def notify_cancel(self, conn: Connection, payloads: Sequence[str]) -> None:
        """Inside the transaction that cancels running jobs: tell their workers at commit (each
        payload names one run). Nothing where the database cannot: they learn at their next
        heartbeat."""

    def notify_events(self, conn: Connection) -> None:
        """Inside a transaction that wrote an event feed row: wake the feed's followers when it
        commits (see :attr:`listen_notify`); followers elsewhere read at their next tick."""

    def tune_history_read(self, conn: Connection) -> None:
        """Inside the history's read transaction: planner settings for its grouped read."""

    # ------------------------------------------------------------------ schema
    def bind(self, conn: Connection) -> Connection:
        """Prepare a caller's connection for chokaq's tables."""
        return conn

    @property
    def table_schema(self) -> str | None:
        return SCHEMA if self.schemas else None

    def migration_lock(self, conn: Connection) -> None:
        """Inside the migration's transaction: the lock that serialises concurrent upgrades, and
        chokaq's schema created."""

    @contextmanager
    def upgrading(self, conn: Connection) -> Iterator[None]:
        """Around the migration's steps: what this database needs checked or lifted first."""
        yield

    def upgrade_keys_and_text(self, conn: Connection) -> None:
        """Migration 3: types the current definitions give keys and user text (nothing to do
        where the database already stores Unicode and compares text exactly)."""

    def upgrade_indexes(self, conn: Connection) -> None:
        """Migration 13: index options only this database has (included columns, sequential
        keys); nothing where the definitions carry none."""

    def add_column(self, conn: Connection, table: Table, column: Column[Any]) -> None:
        """``ALTER TABLE ADD`` a nullable ``column`` unless the table has it."""
        name, definition = nullable_column(conn, table, column)
        conn.execute(text(f"ALTER TABLE {name} ADD COLUMN IF NOT EXISTS {definition}"))

    def script_preamble(self, dialect: Dialect) -> list[str]:
        """Statements a plain DDL script starts with."""
        return []

    def create_search_indexes(self, conn: Connection) -> None:
        """Migration 11: what serves the DLQ search here (dialects/search_indexes.py); nothing
        where no index can serve a substring search."""

    def search_script(self) -> list[str]:
        """Migration 11's statements in a plain DDL script."""
        return []

    def dlq_search(self, needle: str) -> ColumnElement[bool] | None:
        """A condition for "a searched DLQ column contains ``needle``" that an index of this
        database serves, or None: the portable ``lower(col) LIKE`` (which pg_trgm serves)."""
        return None

    script_now: ClassVar[str] = "CURRENT_TIMESTAMP"

    def quote(self, name: str) -> str:
        return f'"{name}"'


def nullable_column(conn: Connection, table: Table, column: Column[Any]) -> tuple[str, str]:
    """``table``'s name in chokaq's schema and ``column``'s definition as a nullable column, quoted
    for ``conn``'s database (for ``ALTER TABLE ... ADD``)."""
    prep = conn.dialect.identifier_preparer
    definition = f"{prep.quote(column.name)} {column.type.compile(conn.dialect)} NULL"
    return f"{prep.quote_schema(SCHEMA)}.{prep.quote(table.name)}", definition


def on_conflict_upsert(insert_fn: Any, table: Table, values: Mapping[str, Any], keep: Collection[str]) -> Any:
    """``INSERT ... ON CONFLICT (key) DO UPDATE SET c = excluded.c``: PostgreSQL's and SQLite's upsert
    (their dialects' ``insert`` share the form)."""
    stmt = insert_fn(table).values(dict(values))
    key = [c.name for c in table.primary_key]
    sets = {name: stmt.excluded[name] for name in values if name not in keep and name not in key}
    return stmt.on_conflict_do_update(index_elements=key, set_=sets)
