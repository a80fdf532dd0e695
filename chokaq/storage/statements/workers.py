"""Worker presence (the Workers table, docs/workers.md): the upsert a worker sends at start and on
its heartbeat tick, its clean exit, and the sweep's two statements (silent workers marked lost, old
stopped and lost rows pruned a bounded batch at a time)."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Delete, Update, and_, bindparam, cast, delete, literal_column, null, select, update

from chokaq.storage.dialects import profile_of
from chokaq.storage.schema import UtcTime, workers
from chokaq.storage.sqlfuncs import seconds, utc_offset, utcnow

LIVE = "live"
STOPPED = "stopped"
LOST = "lost"
STATES = (LIVE, STOPPED, LOST)

_w = workers.c


def _state(value: str) -> Any:
    # A constant in the text, not a parameter: the plans (and queries.sql) show which state.
    return literal_column(f"'{value}'", _w.State.type)


@functools.lru_cache(maxsize=8)
def presence_statement(dialect_name: str, starting: bool, every_queue: bool = False) -> Any:
    """The worker ``:worker_id`` live now, with what it serves and runs: its row inserted, or updated
    in place (one statement, the profile's upsert). ``starting``: its start time set too (a worker
    restarted under the same id begins again); else a tick keeps the start time of its row.
    ``every_queue``: a worker of every queue, its Queues NULL in the text (a NULL parameter costs
    pyodbc a describe round trip on SQL Server)."""
    values: dict[str, Any] = {
        "WorkerId": bindparam("worker_id", type_=_w.WorkerId.type),
        "Host": bindparam("worker_host", type_=_w.Host.type),
        "Pid": bindparam("worker_pid", type_=_w.Pid.type),
        "Version": bindparam("worker_version", type_=_w.Version.type),
        "Queues": cast(null(), _w.Queues.type) if every_queue else bindparam("worker_queues", type_=_w.Queues.type),
        "Concurrency": bindparam("worker_concurrency", type_=_w.Concurrency.type),
        "Running": bindparam("worker_running", type_=_w.Running.type),
        "StartedAtUtc": utcnow(),
        "LastSeenUtc": utcnow(),
        "State": _state(LIVE),
        # Typed: SQL Server's MERGE source row would take a bare NULL for an int.
        "StoppedAtUtc": cast(null(), UtcTime),
    }
    keep = () if starting else ("StartedAtUtc",)
    return profile_of(dialect_name).upsert_statement(workers, values, keep)


@functools.lru_cache(maxsize=1)
def stopped_statement() -> Update:
    """The worker ``:worker_id`` (this process: ``:worker_host``, ``:worker_pid``) exited cleanly. The
    process is named so a stale exit never marks a successor under the same id stopped."""
    now = utcnow()
    return (
        update(workers)
        .where(
            _w.WorkerId == bindparam("worker_id", type_=_w.WorkerId.type),
            _w.Host == bindparam("worker_host", type_=_w.Host.type),
            _w.Pid == bindparam("worker_pid", type_=_w.Pid.type),
        )
        .values(State=_state(STOPPED), StoppedAtUtc=now, LastSeenUtc=now, Running=literal_column("0"))
    )


def lost_statement(silent_for: float) -> Update:
    """Sweep: live workers not seen for ``silent_for`` seconds (Recovery.ProcessingZombieTimeout)
    are lost. A lost worker that comes back marks itself live at its next tick."""
    silent = and_(_w.State == _state(LIVE), _w.LastSeenUtc < utc_offset(seconds(-silent_for)))
    return update(workers).where(silent).values(State=_state(LOST), StoppedAtUtc=utcnow())


def prune_statement(older_than: float, size: int) -> Delete:
    """Sweep: at most ``size`` rows stopped or found lost more than ``older_than`` seconds ago
    deleted (Recovery.WorkerRetention); repeated until a batch is short. Counted from the stop (or
    the sweep that found it lost), not from the last sighting: a row found lost stays for the
    retention too. The condition is repeated outside the subquery so a row that came back to life
    under it is kept."""
    gone = and_(
        _w.State.in_([_state(STOPPED), _state(LOST)]),
        _w.StoppedAtUtc < utc_offset(seconds(-older_than)),
    )
    oldest = select(_w.WorkerId).where(gone).order_by(_w.StoppedAtUtc).limit(size)
    return delete(workers).where(_w.WorkerId.in_(oldest), gone)
