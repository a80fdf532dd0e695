"""The storage adapter: the only package that holds SQL.

One set of SQLAlchemy Core builders renders for SQL Server (``mssql+pyodbc``), PostgreSQL
(``postgresql+psycopg``) and SQLite. Dialect differences are confined to :mod:`.sqlfuncs`
(time arithmetic, lock hints), :mod:`.mssql_shapes` (SQL Server's claim and move batches) and
:mod:`.engine` (connection set-up, transient errors).

Rooms: :mod:`.statements` builds and caches the statements (no execution); :mod:`.store` is the
facade everything outside storage/ holds (:class:`Storage`), over :mod:`.transactions` (the
transaction-and-replay runner), :mod:`.enqueue`, :mod:`.claims`, :mod:`.moving` (moves and
counters), :mod:`.lost_replies`, :mod:`.queues`, :mod:`.wakeups`, :mod:`.statistics` and
:mod:`.queue_stats`; :mod:`.admin` holds operator actions, :mod:`.history` the Deck's charts,
:mod:`.migrations` and :mod:`.schema` the tables.
"""

from chokaq.storage.store import Storage

__all__ = ["Storage"]
