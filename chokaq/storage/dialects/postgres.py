"""PostgreSQL (``postgresql+psycopg``): everything chokaq does differently there.

- Connections: libpq timeouts and keepalives in the connect arguments, a server-side statement
  timeout in the start-up packet; the worker's claims and completions may run on its event loop
  through psycopg's ``AsyncConnection`` (loop_transport.py).
- Wake-ups: NOTIFY inside the enqueuing transaction, delivered at commit, and inside the one that
  cancels running jobs (their workers stop them at once); LISTEN in postgres_listen.py.
- Statements: list parameters bind as arrays; a finishing move is one statement (data-modifying
  CTEs) that bumps its own counter; the planner's statistics are kept current (postgres_statistics.py).
- Errors worth a replay: serialisation failures, deadlocks, connection and admin-shutdown classes,
  too many connections, a cancelled statement, and libpq's words for a link that broke.
- Migrations: an advisory transaction lock; the statement timeout lifted for the upgrade.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import Connection, Engine, Table, bindparam, create_engine, func, select, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import URL, Dialect
from sqlalchemy.schema import CreateSchema

from chokaq.storage.dialects.base import EngineOptions, Profile, on_conflict_upsert
from chokaq.storage.dialects.search_indexes import create_postgres_search, postgres_trigram_indexes
from chokaq.storage.schema import SCHEMA

if TYPE_CHECKING:
    from chokaq.storage.statements import MoveStatements

NOTIFY_CHANNEL = "chokaq_jobs"
# Running jobs an operator cancelled: the payload names the run (see storage/cancel.py).
CANCEL_CHANNEL = "chokaq_cancel"
# The event feed's followers (chokaq/storage/event_feed.py): a row was committed.
EVENTS_CHANNEL = "chokaq_events"
# pg_advisory_xact_lock takes a bigint; any fixed number unique to chokaq works.
PG_LOCK_KEY = 0x43484F4B41510001

TRANSIENT_SQLSTATE_PREFIXES = ("40001", "40P01", "08", "57P01", "57P02", "57P03", "53300", "57014")
# libpq's own words for a connection that failed or broke (no SQLSTATE: the server never answered).
TRANSIENT_CONNECTION_TEXT = (
    "connection refused",
    "timeout expired",
    "server closed the connection",
    "connection reset",
    "connection timed out",
    "no route to host",
    "network is unreachable",
    "the database system is",
)


def postgresql_connect_args(query: Any, connect_timeout: float, statement_timeout: float) -> dict[str, Any]:
    """libpq parameters that end a hung connection within seconds instead of hours: a connect
    timeout, TCP keepalives and a user timeout (unacknowledged data), and a server-side statement
    timeout. The timeout goes in the start-up packet (``options``), so it costs no round trip.
    Parameters given in the URL win."""
    args: dict[str, Any] = {
        "connect_timeout": max(1, round(connect_timeout)),
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": 15_000,
    }
    args = {k: v for k, v in args.items() if k not in query}
    if statement_timeout > 0:
        option = f"-c statement_timeout={round(statement_timeout * 1000)}"
        args["options"] = f"{query['options']} {option}" if "options" in query else option
    return args


class PostgresProfile(Profile):
    name = "postgresql"
    label = "postgres"
    extra = "postgres"
    listen_notify = True
    statistics = True
    loop_transport = True
    list_arrays = True
    moves_alone = True
    fetch_returning = True
    prepared_statements = True
    script_now: ClassVar[str] = "(now() AT TIME ZONE 'UTC')"

    def build_engine(self, url: URL, options: EngineOptions) -> Engine:
        connect_args = postgresql_connect_args(url.query, options.connect_timeout, options.statement_timeout)
        size = options.pool_size
        return create_engine(url, pool_size=size, max_overflow=size, echo=options.echo, connect_args=connect_args)

    def transient(self, exc: BaseException) -> bool:
        sqlstate = getattr(exc, "sqlstate", None)
        if isinstance(sqlstate, str) and sqlstate.startswith(TRANSIENT_SQLSTATE_PREFIXES):
            return True
        text_ = " ".join(str(a) for a in getattr(exc, "args", ())).lower()
        return type(exc).__module__.startswith("psycopg") and any(t in text_ for t in TRANSIENT_CONNECTION_TEXT)

    def ddl_dialect(self) -> Dialect:
        return postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]

    def scripting_dialect(self) -> Dialect:
        return postgresql.psycopg.dialect(paramstyle="named")  # type: ignore[no-untyped-call]

    def alone_move(self, move: MoveStatements) -> Any:
        return move.single

    def upsert_statement(self, table: Table, values: Mapping[str, Any], keep: Collection[str] = ()) -> Any:
        return on_conflict_upsert(postgresql.insert, table, values, keep)

    def notify(self, conn: Connection, queue: str) -> None:
        # Delivered to listening workers when (and only if) the transaction commits.
        conn.execute(select(func.pg_notify(NOTIFY_CHANNEL, queue)))

    def notify_statement(self) -> Any:
        return _notify_statement()

    def notify_cancel(self, conn: Connection, payloads: Sequence[str]) -> None:
        # One per cancelled run (at most limits.MAX_BULK_IDS), delivered at commit.
        for payload in payloads:
            conn.execute(select(func.pg_notify(CANCEL_CHANNEL, payload)))

    def notify_events(self, conn: Connection) -> None:
        conn.execute(select(func.pg_notify(EVENTS_CHANNEL, "")))

    def tune_history_read(self, conn: Connection) -> None:
        # The planner cannot estimate groups of computed buckets and guesses one per row, so it
        # would sort every row (spilling to disk) where a hash of a few thousand groups fits in
        # memory; and JIT-compiling the expressions costs more than it saves at 1M rows.
        # LOCAL: for this read transaction only.
        conn.exec_driver_sql("SET LOCAL enable_sort = off")
        conn.exec_driver_sql("SET LOCAL jit = off")

    def migration_lock(self, conn: Connection) -> None:
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_LOCK_KEY})
        conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{SCHEMA}"'))

    @contextmanager
    def upgrading(self, conn: Connection) -> Iterator[None]:
        # Storage.StatementTimeout is for the worker's statements; a migration (or a wait for
        # another process's migration lock) may rightly take longer. LOCAL: back at commit.
        conn.exec_driver_sql("SET LOCAL statement_timeout = 0")
        yield

    def script_preamble(self, dialect: Dialect) -> list[str]:
        return [str(CreateSchema(SCHEMA, if_not_exists=True).compile(dialect=dialect)).strip()]

    def create_search_indexes(self, conn: Connection) -> None:
        create_postgres_search(conn)

    def search_script(self) -> list[str]:
        return ["CREATE EXTENSION IF NOT EXISTS pg_trgm", *postgres_trigram_indexes()]


@functools.cache
def _notify_statement() -> Any:
    return select(func.pg_notify(NOTIFY_CHANNEL, bindparam("queue")))
