"""The engine for a storage URL, and which database errors are worth replaying a transaction for.

Both ask the database profiles (dialects/): each builds its own engine and classifies its own
driver's errors.
"""

from __future__ import annotations

from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from chokaq.domain.errors import ConfigurationError
from chokaq.redact import redact
from chokaq.storage.dialects import PROFILES
from chokaq.storage.dialects.base import EngineOptions


def build_engine(
    url: str,
    *,
    pool_size: int = 10,
    echo: bool = False,
    command_timeout: int = 0,
    connect_timeout: float = 10.0,
    statement_timeout: float = 0.0,
) -> Engine:
    """Create the engine for ``url`` with what each database needs to behave as a queue."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigurationError(redact(f"storage URL {url!r} is not a valid database URL: {exc}")) from None
    backend = parsed.get_backend_name()
    profile = PROFILES.get(backend)
    if profile is None:
        raise ConfigurationError(f"unsupported database {backend!r}: use sqlite, postgresql+psycopg or mssql+pyodbc")
    try:
        options = EngineOptions(pool_size, echo, command_timeout, connect_timeout, statement_timeout)
        return profile.build_engine(parsed, options)
    except NoSuchModuleError as exc:
        raise ConfigurationError(redact(f"no driver for {url!r}: {exc}")) from None
    except ModuleNotFoundError as exc:
        raise ConfigurationError(
            f"the driver for {backend} is not installed ({exc.name}); pip install 'chokaq[{profile.extra}]'"
        ) from None


def is_transient(exc: BaseException) -> bool:
    """True when replaying the whole transaction may succeed."""
    invalidated = False
    if isinstance(exc, DBAPIError):
        invalidated = exc.connection_invalidated
        exc = exc.orig if exc.orig is not None else exc
    profiles = PROFILES.values()
    if any(p.never_transient(exc) for p in profiles):
        return False
    # Each profile knows its own driver's errors; the error's type says whose it is.
    return invalidated or any(p.transient(exc) for p in profiles)
