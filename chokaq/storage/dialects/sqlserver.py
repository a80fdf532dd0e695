"""SQL Server and Azure SQL (``mssql+pyodbc``): everything chokaq does differently there.

The rest of SQL Server's differences live beside this profile, each in one module:
:mod:`.sqlserver_connect` (engine, token sign-in, command timeout, the autocommit pool),
:mod:`.sqlserver_errors` (native error numbers worth a replay, a missing ODBC driver),
:mod:`.sqlserver_shapes` (the claim as an updatable CTE over one index, fences over one lease rowset,
a move and its counter as one batch), :mod:`.sqlserver_keys` (migration 3) with
:mod:`.sqlserver_upgrade_checks` (what it refuses first), :mod:`.sqlserver_indexes` (migration 13),
:mod:`.sqlserver_sizes` (declared text lengths) and :mod:`.sqlserver_requirements` (what
`chokaq db upgrade` checks first). Lock hints, time arithmetic
and list parameters compile through ``@compiles(..., "mssql")`` in ``sqlfuncs.py``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import Column, Connection, Engine, String, Table, cast, literal, text
from sqlalchemy.dialects import mssql
from sqlalchemy.engine import URL, Dialect

from chokaq.storage.dialects import sqlserver_errors
from chokaq.storage.dialects.base import EngineOptions, Profile, nullable_column
from chokaq.storage.schema import SCHEMA

if TYPE_CHECKING:
    from chokaq.storage.statements import MoveStatements

MIGRATION_LOCK = "chokaq.migrations"
#: Rows (so row or key locks on one index) one SQL Server statement may take: under the 5,000 locks
#: on one index or table at which SQL Server escalates a statement's locks to a table lock, which
#: READPAST does not skip and ROWLOCK does not prevent (docs/sqlserver.md, "Lock escalation").
MAX_ROWS_PER_STATEMENT = 4000
_RELEASE = text(
    "IF APPLOCK_MODE('public', :r, 'Session') <> 'NoLock' EXEC sp_releaseapplock @Resource = :r, @LockOwner = 'Session'"
)


class SqlServerProfile(Profile):
    name = "mssql"
    label = "sqlserver"
    extra = "mssql"
    moves_alone = True
    lease_rowset = True
    script_separator: ClassVar[str] = "\nGO\n"
    # SQL Server refuses a request of more than 2,100 parameters and a VALUES list of more than
    # 1,000 rows; 2,099 is SQLAlchemy's own bound (it keeps one free).
    insert_rows_max: ClassVar[int] = 1000
    insert_params_max: ClassVar[int] = 2099
    script_now: ClassVar[str] = "SYSUTCDATETIME()"
    max_rows_per_statement: ClassVar[int | None] = MAX_ROWS_PER_STATEMENT

    def build_engine(self, url: URL, options: EngineOptions) -> Engine:
        from chokaq.storage.dialects.sqlserver_connect import mssql_engine

        return mssql_engine(
            url, pool_size=options.pool_size, echo=options.echo, command_timeout=options.command_timeout
        )

    def autocommit_twin(self, engine: Engine) -> Engine | None:
        from chokaq.storage.dialects.sqlserver_connect import autocommit_twin

        return autocommit_twin(engine)

    def transient(self, exc: BaseException) -> bool:
        return sqlserver_errors.transient(exc)

    def never_transient(self, exc: BaseException) -> bool:
        # SQLAlchemy takes unixODBC's 01000 for a dropped link; replaying cannot install a driver.
        return sqlserver_errors.missing_odbc_driver(exc) is not None

    def ddl_dialect(self) -> Dialect:
        return mssql.pyodbc.dialect()  # type: ignore[no-untyped-call]

    def scripting_dialect(self) -> Dialect:
        d: Any = mssql.pyodbc.dialect(paramstyle="named")  # type: ignore[no-untyped-call]
        # As initialised against SQL Server 2022 (what production's first connection reports).
        d.server_version_info = (16, 0)
        d._setup_version_attributes()
        return d  # type: ignore[no-any-return]

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
        from chokaq.storage import statements as st

        # The queues as one list parameter: one statement text whatever their number.
        if queue_names:
            params["claim_queues"] = list(queue_names)
        # At most n claim-index keys locked per queue read: n x queues within the statement's cap.
        # Named queues are all read (fewer rows per claim, in exact claim order); for every queue
        # the statement reads at most cap // n of them (statements/claim.py).
        limit = self.statement_rows(min(limit, MAX_ROWS_PER_STATEMENT // max(1, len(queue_names))))
        return st.mssql_claim_statement(bool(queue_names), limited, limit, start, zombie_retry, breaker)

    def probe_ids_statement(self, limit: int, by_queue: bool) -> Any:
        from chokaq.storage.statements.breakers import mssql_probe_ids_statement

        return mssql_probe_ids_statement(self.statement_rows(limit), by_queue)

    def probe_claim_statement(self) -> Any:
        from chokaq.storage.statements.breakers import probe_claim_statement

        # By primary key: the probes' claim-index keys are locked already, by the read of their ids.
        return probe_claim_statement(by_key=True)

    def exact_time(self, value: datetime) -> Any:
        # ISO 8601 text cast on the server, not a datetime parameter: pyodbc sends a datetime with
        # the precision the driver reports for SQL_TYPE_TIMESTAMP, and FreeTDS may report the old
        # DATETIME's (milliseconds), which would move the bound and drop previewed rows. The 'T'
        # form is read the same whatever the session's DATEFORMAT and language.
        text_ = literal(value.isoformat(sep="T", timespec="microseconds"), String(26))
        return cast(text_, mssql.DATETIME2(precision=7))  # type: ignore[no-untyped-call]

    def input_size(self, dbtype: Any, type_: Any) -> tuple[Any, Any, Any]:
        from chokaq.storage.dialects.sqlserver_sizes import input_size

        return input_size(dbtype, type_)

    def alone_move(self, move: MoveStatements) -> Any:
        return move.batch

    def upsert_statement(self, table: Table, values: Mapping[str, Any], keep: Collection[str] = ()) -> Any:
        from chokaq.storage.dialects.sqlserver_merge import Merge

        return Merge(table, values, keep)

    def typed_insert_many(self, stmt: Any, id_column: Column[Any]) -> Any:
        # RETURNING makes SQLAlchemy send multi-row VALUES batches (at most 2,099 parameters
        # each) typed by setinputsizes, NVARCHAR(max) for a payload. A plain executemany goes
        # through fast_executemany, which sends no types: pyodbc then has the server describe
        # every parameter, and binds VARCHAR(255) when that fails.
        return stmt.returning(id_column)

    def migration_lock(self, conn: Connection) -> None:
        rc = conn.execute(
            text(
                "DECLARE @rc int; EXEC @rc = sp_getapplock @Resource = :r, @LockMode = 'Exclusive', "
                "@LockOwner = 'Session', @LockTimeout = 120000; SELECT @rc"
            ),
            {"r": MIGRATION_LOCK},
        ).scalar()
        if rc is None or int(rc) < 0:
            raise RuntimeError(f"could not take the migration lock (sp_getapplock returned {rc})")
        conn.execute(text(f"IF SCHEMA_ID('{SCHEMA}') IS NULL EXEC('CREATE SCHEMA [{SCHEMA}]')"))

    @contextmanager
    def upgrading(self, conn: Connection) -> Iterator[None]:
        from chokaq.storage.dialects.sqlserver_connect import mssql_without_timeouts
        from chokaq.storage.dialects.sqlserver_requirements import check_sql_server

        check_sql_server(conn)
        with mssql_without_timeouts(conn):
            # The migration lock is the session's (migration 3 commits a step per table): it must
            # not stay with a pooled connection. Released after the caller's commit, or a rollback.
            try:
                yield
            except BaseException:
                try:
                    conn.rollback()
                    conn.execute(_RELEASE, {"r": MIGRATION_LOCK})
                except Exception:  # the upgrade's own error is the one to report
                    conn.invalidate()
                raise
            conn.execute(_RELEASE, {"r": MIGRATION_LOCK})

    def upgrade_keys_and_text(self, conn: Connection) -> None:
        from chokaq.storage.dialects.sqlserver_keys import upgrade_keys_and_text

        upgrade_keys_and_text(conn)

    def upgrade_indexes(self, conn: Connection) -> None:
        from chokaq.storage.dialects.sqlserver_indexes import upgrade_indexes

        upgrade_indexes(conn)

    def add_column(self, conn: Connection, table: Table, column: Column[Any]) -> None:
        name, definition = nullable_column(conn, table, column)
        conn.execute(
            text(f"IF COL_LENGTH('{SCHEMA}.{table.name}', '{column.name}') IS NULL ALTER TABLE {name} ADD {definition}")
        )

    def script_preamble(self, dialect: Dialect) -> list[str]:
        return [
            # ODBC sqlcmd starts with QUOTED_IDENTIFIER OFF, and filtered indexes refuse to be
            # created without these (Msg 1934). They hold for the session: once at the top is enough.
            "SET ANSI_NULLS ON;\nSET ANSI_PADDING ON;\nSET ANSI_WARNINGS ON;\nSET ARITHABORT ON;\n"
            "SET CONCAT_NULL_YIELDS_NULL ON;\nSET NUMERIC_ROUNDABORT OFF;\nSET QUOTED_IDENTIFIER ON;",
            f"IF SCHEMA_ID('{SCHEMA}') IS NULL EXEC('CREATE SCHEMA [{SCHEMA}]')",
        ]

    def quote(self, name: str) -> str:
        return f"[{name}]"
