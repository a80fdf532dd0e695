"""One profile per database: the single home of what each does differently (see :mod:`.base`).

Storage code asks :func:`profile_of` its engine's or connection's dialect and calls the profile;
it never branches on the dialect's name itself.
"""

from __future__ import annotations

from sqlalchemy.engine import Dialect

from chokaq.storage.dialects.base import Profile
from chokaq.storage.dialects.postgres import PostgresProfile
from chokaq.storage.dialects.sqlite import SqliteProfile
from chokaq.storage.dialects.sqlserver import SqlServerProfile

#: Every supported database, by SQLAlchemy's dialect name.
PROFILES: dict[str, Profile] = {p.name: p for p in (SqliteProfile(), PostgresProfile(), SqlServerProfile())}


def profile_of(dialect: Dialect | str) -> Profile:
    """The profile of ``dialect`` (a dialect or its name); KeyError for a database chokaq does not support."""
    return PROFILES[dialect if isinstance(dialect, str) else dialect.name]


__all__ = ["PROFILES", "PostgresProfile", "Profile", "SqlServerProfile", "SqliteProfile", "profile_of"]
