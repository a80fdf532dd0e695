"""Driver errors as SQLAlchemy raises them, for the statements run straight on driver connections
(the threads' executor and the worker's loop transport): ``DBAPIError.instance``, with
``connection_invalidated`` from the dialect's own disconnect test, so the replay rules
(``is_transient``, the lost-reply rule) see what they see from SQLAlchemy's own execution."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError


def broken(raw: Any) -> bool:
    """Whether a driver connection can no longer be used (psycopg's ``closed`` or ``broken``)."""
    return bool(getattr(raw, "closed", False)) or bool(getattr(raw, "broken", False))


def driver_error(dialect: Dialect, exc: Any, raw: Any, cursor: Any, sql: str, values: Any) -> tuple[Exception, bool]:
    """A driver error as SQLAlchemy raises it (``DBAPIError.instance``), and whether the dialect's
    disconnect test says the connection is gone (``connection_invalidated``)."""
    invalidated = bool(dialect.is_disconnect(exc, raw, cursor))
    wrapped: Exception = DBAPIError.instance(
        sql, values, exc, dialect.loaded_dbapi.Error, connection_invalidated=invalidated, dialect=dialect
    )
    return wrapped, invalidated
