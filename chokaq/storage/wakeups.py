"""Wake-ups for workers when new Pending work is committed: in this process (listeners and
announcers) and, where the database can deliver them, in others (PostgreSQL's NOTIFY, heard by
dialects/postgres_listen.py). The same for running jobs an operator cancelled (:meth:`Wakeups.cancelled`).

Separate from the app's event bus (``ChokaQ.bus``) on purpose: the bus carries operator events (what happened, for
people and the Deck), and may be slow or absent. A wake-up is only a hint to local workers to look
sooner instead of at their next poll: it carries no record of what happened, and losing one costs
latency, never a job (the jobs are stored before anyone is woken).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from sqlalchemy import Connection

from chokaq.storage.dialects import profile_of
from chokaq.storage.dialects.postgres import NOTIFY_CHANNEL

log = logging.getLogger("chokaq.storage")

__all__ = ["NOTIFY_CHANNEL", "Announcer", "Wakeups", "notify"]

# ``{queue: seconds until its first new job is due}``, or None when the queues are not known.
Announcer = Callable[[Mapping[str, float] | None], None]


def notify(conn: Connection, queue: str) -> None:
    """Inside the transaction that stores new work on ``queue``: where the database has NOTIFY, it
    reaches listening workers when (and only if) the transaction commits. Nothing elsewhere."""
    profile_of(conn.dialect).notify(conn, queue)


class Wakeups:
    """The in-process subscribers to "new work was committed" (see the module docstring)."""

    def __init__(self) -> None:
        # Same-process wake-ups (SQLite, or any database before NOTIFY arrives): workers in this
        # process start new work at once instead of at their next poll.
        self._listeners: list[Callable[[], None]] = []
        # After-commit announcers for other processes (the Functions doorbell): see add_announcer.
        self._announcers: list[Announcer] = []
        # Workers in this process told of running jobs an operator cancelled here (storage/cancel.py):
        # at once on any database, where NOTIFY reaches only other processes' listeners.
        self._cancel_listeners: list[Callable[[str], None]] = []

    def on_enqueue(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` after this process commits new Pending work. Returns an unsubscriber."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    def on_cancel(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback`` with each run (a cancel payload) an operator cancelled through this
        process, after the cancel commits. Returns an unsubscriber."""
        self._cancel_listeners.append(callback)
        return lambda: self._cancel_listeners.remove(callback)

    def cancelled(self, payloads: list[str]) -> None:
        for callback in list(self._cancel_listeners):
            for payload in payloads:
                callback(payload)

    def add_announcer(self, announcer: Announcer) -> Callable[[], None]:
        """Call ``announcer`` after this process commits new Pending work, with ``{queue: seconds
        until its first new job is due}``, or None when the queues are not known (a resurrect).

        It runs in the committing thread after the commit, so it must be quick; whatever it raises is
        logged and dropped: the jobs are stored, and an announcement is only a hint to look sooner.
        Returns an unsubscriber."""
        self._announcers.append(announcer)
        return lambda: self._announcers.remove(announcer)

    def announce(self, due: Mapping[str, float] | None = None) -> None:
        for callback in list(self._listeners):
            callback()
        for announcer in list(self._announcers):
            try:
                announcer(due)
            except Exception:
                log.exception("enqueue announcer failed (the jobs are stored)")
