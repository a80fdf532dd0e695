"""SQL Server's autocommit twin: a second pool for the single-statement hot path."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, event


def autocommit_twin(engine: Engine) -> Engine | None:
    """SQL Server: a second pool, over the same connection set-up, whose connections stay in
    autocommit for their whole life, for the single-statement hot path; None elsewhere.

    Switching a pooled connection to AUTOCOMMIT for one statement costs a
    ``SET TRANSACTION ISOLATION LEVEL`` round trip when SQLAlchemy resets it on its way back to
    the pool. PostgreSQL switches client-side and keeps the shared pool.
    """
    if engine.dialect.name != "mssql":
        return None
    pool = engine.pool.recreate()  # same creator and connect-time set-up, its own connections

    @event.listens_for(pool, "connect")
    def _autocommit(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.autocommit = True

    return Engine(pool, engine.dialect, engine.url, echo=engine.echo)
