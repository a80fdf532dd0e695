"""One writing statement straight through the driver on a connection of a pool (a producer's
enqueue), not on a database thread's own link (thread_links.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError

from chokaq.domain.errors import ConfigurationError
from chokaq.storage.dialects.sqlserver_errors import missing_odbc_driver
from chokaq.storage.driver_errors import broken
from chokaq.storage.executor_sql import Rows
from chokaq.storage.thread_links import Link

if TYPE_CHECKING:
    from chokaq.storage.executor import Executor


def run_pooled(
    executor: Executor, pool: Engine, stmt: Any, params: Mapping[str, Any], *, sending: Callable[[], None]
) -> Rows:
    """Run one writing statement by itself (autocommit) on a connection checked out of ``pool``
    and returned to it, by ``executor`` (its rendering, its error handling): for producers (an
    enqueue), whose threads are the application's and may be many, so their connections stay
    bounded by the pool. PostgreSQL and SQL Server only (SQLite keeps its BEGIN IMMEDIATE
    transaction). ``sending``: see :meth:`Executor.run`.

    Against SQLAlchemy's own execution of the same statement this leaves out the execution
    context, the compile-cache lookup and the two isolation-level switches around it: about
    250 µs of a producer's CPU per enqueue, measured, where the driver's own share is 50 µs.
    A connection that broke is invalidated, so the pool never hands it out again."""
    fairy = _checkout(executor.dialect, pool)
    switched = False
    try:
        raw: Any = fairy.dbapi_connection
        link = Link(None, raw)
        if not raw.autocommit:
            # psycopg switches client-side, no round trip; the pool's other users expect a
            # transaction, so it is switched back below. SQL Server's twin stays in autocommit.
            executor._call(link, lambda: setattr(raw, "autocommit", True))
            switched = True
        sending()
        return executor._execute(link, stmt, params)[0]
    except DBAPIError as exc:
        if exc.connection_invalidated:
            # As SQLAlchemy does on a disconnect: every connection the pool made before now is
            # replaced at its next check-out (the server restarted or failed over, and they
            # broke too), so a replay does not meet another dead one.
            pool.pool._invalidate(fairy, exc.orig if isinstance(exc.orig, BaseException) else None)
        elif broken(fairy.dbapi_connection):
            fairy.invalidate()
        raise
    except BaseException:
        # Anything else (Ctrl-C, a bug in binding): the connection's state is not known, so
        # it is not handed out again; SQLAlchemy does so for exit exceptions only, and a
        # reconnect is all this costs.
        fairy.invalidate()
        raise
    finally:
        if switched and fairy.dbapi_connection is not None:
            try:
                fairy.dbapi_connection.autocommit = False
            except Exception:
                # Never back in the pool in autocommit: its next user's transaction would not be one.
                fairy.invalidate()
        fairy.close()


def _checkout(dialect: Dialect, pool: Engine) -> Any:
    """A pooled connection, connect errors raised as the engine raises them (classified
    transient or not by the same rules)."""
    try:
        return pool.raw_connection()
    except dialect.loaded_dbapi.Error as exc:
        # raw_connection() bypasses the engine's handle_error hook, which names a missing
        # ODBC driver (build_engine): named here the same way.
        message = missing_odbc_driver(exc)
        if message is not None:
            raise ConfigurationError(message) from exc
        raise DBAPIError.instance(
            None,
            None,
            exc,
            dialect.loaded_dbapi.Error,
            connection_invalidated=bool(dialect.is_disconnect(exc, None, None)),
            dialect=dialect,
        ) from exc
