"""The storage adapter: the only package that holds SQL.

One set of SQLAlchemy Core builders renders for SQL Server (``mssql+pyodbc``), PostgreSQL
(``postgresql+psycopg``) and SQLite. Dialect differences are confined to :mod:`.sqlfuncs`
(time arithmetic, lock hints) and :mod:`.engine` (connection set-up, transient errors).
"""

from chokaq.storage.store import Storage

__all__ = ["Storage"]
