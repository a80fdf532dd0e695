"""The schedules' statements: which rows are due, the firing lock, and moving a row on.

The firing transaction (storage/schedules.py) is :func:`lock_due_statement`, the job's INSERT
(statements/enqueue.py, with the slot's idempotency key) and :func:`advance_statement`, in that
order, in one transaction. The lock skips a row another process holds (``FOR UPDATE SKIP LOCKED``
on PostgreSQL, ``WITH (UPDLOCK, READPAST, ROWLOCK)`` on SQL Server; SQLite's ``BEGIN IMMEDIATE``
already serialises every writer), and its ``NextDueUtc <= now`` is read again under the lock, so a
row another process fired meanwhile is no longer due.
"""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Select, Update, bindparam, false, select, update

from chokaq.storage.schema import schedules
from chokaq.storage.sqlfuncs import claim_lock, utcnow

_s = schedules.c


def _firing() -> Any:
    return (_s.IsPaused == false()) & (_s.IsOrphaned == false())


@functools.lru_cache(maxsize=1)
def due_names_statement() -> Select[Any]:
    """The names of the rows due now, oldest slot first; no lock (the firing takes one per row)."""
    return select(_s.Name).where(_s.NextDueUtc <= utcnow(), _firing()).order_by(_s.NextDueUtc, _s.Name)


@functools.lru_cache(maxsize=1)
def lock_due_statement() -> Select[Any]:
    """Schedule ``:sched_name``, locked, when it is due and no other process holds it."""
    stmt = select(schedules, utcnow().label("now_utc")).where(
        _s.Name == bindparam("sched_name", type_=_s.Name.type), _s.NextDueUtc <= utcnow(), _firing()
    )
    return claim_lock(stmt, schedules)


@functools.lru_cache(maxsize=2)
def advance_statement(fired: bool) -> Update:
    """Schedule ``:sched_name`` moved on to its next slot; ``fired``: with the slot it fired and
    that slot's job (else, the policy skipped every due slot, those stay as they were)."""
    values: dict[str, Any] = {"NextDueUtc": bindparam("next_due", type_=_s.NextDueUtc.type)}
    if fired:
        values["LastSlotUtc"] = bindparam("last_slot", type_=_s.LastSlotUtc.type)
        values["LastJobId"] = bindparam("last_job", type_=_s.LastJobId.type)
        values["LastFiredUtc"] = utcnow()
    return update(schedules).where(_s.Name == bindparam("sched_name", type_=_s.Name.type)).values(**values)
