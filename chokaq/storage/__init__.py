"""The storage adapter: the only package that holds SQL, and its one front door. Code outside
``chokaq/storage/`` imports from here, never from a module inside it.

One set of SQLAlchemy Core builders renders for SQL Server (``mssql+pyodbc``), PostgreSQL
(``postgresql+psycopg``) and SQLite. What each database does differently lives in its profile
(:mod:`.dialects`), with the time arithmetic and lock hints in :mod:`.sqlfuncs`.

Rooms: :mod:`.statements` builds and caches the statements (no execution); :mod:`.store` is the
facade everything outside storage/ holds (:class:`Storage`), over :mod:`.transactions` (the
transaction-and-replay runner, with :mod:`.executor` and :mod:`.executor_sql`: the hot path's
statements rendered once and run straight on per-thread driver connections), :mod:`.enqueue`,
:mod:`.claims`, :mod:`.moving` (moves and counters), :mod:`.lost_replies`, :mod:`.queues`,
:mod:`.wakeups`, :mod:`.recovery` (the sweep) and :mod:`.queue_figures`; :mod:`.worker_store` is
one worker's way in (:meth:`Storage.for_worker`), :mod:`.dialects.postgres_listen` its LISTEN; :mod:`.admin` holds
operator actions (with :mod:`.cancel`, cancelling jobs and what a worker reads of it, and
:mod:`.retention`, bounded purges of old rows), :mod:`.history` the Deck's charts,
:mod:`.migrations` and :mod:`.schema` the tables; :mod:`.steps` the step journal (docs/steps.md).

The operator's and the Deck's names (admin, history, the DBA scripts) load on first use: a worker
or a CLI command that needs none of them does not import those modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from chokaq.storage.dialects.postgres_listen import listen
from chokaq.storage.engine import is_transient
from chokaq.storage.steps import finish_step, load_steps, start_step
from chokaq.storage.store import Completion, DeadLetter, StartResult, Storage
from chokaq.storage.transactions import Ambiguity
from chokaq.storage.worker_store import Take, WorkerStore

if TYPE_CHECKING:
    from chokaq.storage.admin import AdminStore
    from chokaq.storage.admin_types import Actor, BulkResult, JobEdit, JobFilter
    from chokaq.storage.breakers import BreakerStore
    from chokaq.storage.event_feed import SYSTEM_SWEEP, EventFeed, FeedRow, purge_events
    from chokaq.storage.figures_cache import Figures, FiguresCache
    from chokaq.storage.history import WAIT_BASIS, WINDOWS, load_history
    from chokaq.storage.incidents import Incident, crash_incidents
    from chokaq.storage.migrations import render_script
    from chokaq.storage.queries import render_queries
    from chokaq.storage.schedules import ScheduleStore
    from chokaq.storage.schema_check import SchemaBehind, require_current
    from chokaq.storage.verdicts import settle_verdict
    from chokaq.storage.workers import WorkerDirectory, WorkerPresence

__all__ = [
    "SYSTEM_SWEEP",
    "WAIT_BASIS",
    "WINDOWS",
    "Actor",
    "AdminStore",
    "Ambiguity",
    "BreakerStore",
    "BulkResult",
    "Completion",
    "DeadLetter",
    "EventFeed",
    "FeedRow",
    "Figures",
    "FiguresCache",
    "Incident",
    "JobEdit",
    "JobFilter",
    "ScheduleStore",
    "SchemaBehind",
    "StartResult",
    "Storage",
    "Take",
    "WorkerDirectory",
    "WorkerPresence",
    "WorkerStore",
    "crash_incidents",
    "finish_step",
    "is_transient",
    "listen",
    "load_history",
    "load_steps",
    "purge_events",
    "render_queries",
    "render_script",
    "require_current",
    "settle_verdict",
    "start_step",
]

# Loaded on first use (see the module's docstring): name -> the module that defines it.
_LAZY = {
    "AdminStore": "chokaq.storage.admin",
    "Actor": "chokaq.storage.admin_types",
    "BreakerStore": "chokaq.storage.breakers",
    "BulkResult": "chokaq.storage.admin_types",
    "EventFeed": "chokaq.storage.event_feed",
    "FeedRow": "chokaq.storage.event_feed",
    "SYSTEM_SWEEP": "chokaq.storage.event_feed",
    "purge_events": "chokaq.storage.event_feed",
    "Figures": "chokaq.storage.figures_cache",
    "FiguresCache": "chokaq.storage.figures_cache",
    "JobEdit": "chokaq.storage.admin_types",
    "JobFilter": "chokaq.storage.admin_types",
    "WAIT_BASIS": "chokaq.storage.history",
    "WINDOWS": "chokaq.storage.history",
    "load_history": "chokaq.storage.history",
    "Incident": "chokaq.storage.incidents",
    "crash_incidents": "chokaq.storage.incidents",
    "render_script": "chokaq.storage.migrations",
    "render_queries": "chokaq.storage.queries",
    "ScheduleStore": "chokaq.storage.schedules",
    "SchemaBehind": "chokaq.storage.schema_check",
    "require_current": "chokaq.storage.schema_check",
    "WorkerDirectory": "chokaq.storage.workers",
    "WorkerPresence": "chokaq.storage.workers",
    "settle_verdict": "chokaq.storage.verdicts",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
