"""Keys: queue names, job types, idempotency keys. Checked at the edge, before any database.

SQL Server ignores trailing spaces whenever it compares strings (``'a' = 'a  '`` is true, even
under a binary collation), while PostgreSQL and SQLite do not. A key with whitespace at either end
would therefore name one thing on SQL Server and another elsewhere, so it is refused everywhere.
"""

from __future__ import annotations

from chokaq.domain.errors import JobValidationError


def check_key(what: str, value: str) -> str:
    """Return ``value`` if it is a usable key; raise :class:`JobValidationError` naming ``what``."""
    if not value:
        raise JobValidationError(f"{what} must not be empty")
    if value != value.strip():
        raise JobValidationError(f"{what} {value[:80]!r} starts or ends with whitespace; keys must not")
    return value
