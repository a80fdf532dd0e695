"""Is the database's schema the one this code writes to? Asked once per storage before a worker
starts or a sweep runs.

Code newer than its database fails in the middle of its work: a worker's failure writes (or a
sweep's rescue) touching a table a later migration makes are refused, the outcome is abandoned, the
sweep stops rescuing, and jobs that ran end up as Zombies once someone upgrades. Refusing to start,
with the command that fixes it, loses nothing."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

from sqlalchemy import Connection, inspect, select

from chokaq.domain.errors import ConfigurationError
from chokaq.storage.dialects import profile_of
from chokaq.storage.migrations import MIGRATIONS
from chokaq.storage.schema import schema_migrations

if TYPE_CHECKING:
    from chokaq.storage.store import Storage

_checked: weakref.WeakSet[Storage] = weakref.WeakSet()
_lock = threading.Lock()


class SchemaBehind(ConfigurationError):
    """The database lacks migrations this code needs: run `chokaq db upgrade`."""


def missing_migrations(storage: Storage) -> list[int]:
    """The versions this code knows that the database has not applied (all of them on a database
    chokaq never upgraded)."""

    def work(conn: Connection) -> list[int]:
        profile = profile_of(conn.dialect)
        if not inspect(conn).has_table(schema_migrations.name, schema=profile.table_schema):
            return [v for v, _, _ in MIGRATIONS]
        done = {int(v) for v in conn.execute(select(schema_migrations.c.Version)).scalars()}
        return [v for v, _, _ in MIGRATIONS if v not in done]

    return storage.read(work, op="schema_version")


def require_current(storage: Storage) -> None:
    """Raise :class:`SchemaBehind` (one line, with the fix) when the database is behind this code.
    Asked of the database once per storage: later calls cost nothing."""
    with _lock:
        if storage in _checked:
            return
    missing = missing_migrations(storage)
    if missing:
        raise SchemaBehind(
            f"the database lacks migration(s) {', '.join(map(str, missing))} that this chokaq needs: "
            "run `chokaq db upgrade` (docs/operating.md), then start again"
        )
    with _lock:
        _checked.add(storage)
