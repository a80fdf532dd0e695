"""The event feed (docs/live-events.md): what every process's Deck should hear of, durable and bounded.

Writers add one row inside the transaction of the change it describes (:func:`record`): the
sweep's rescue (recovery.py), a worker's batch of dead-letters (store.py), an operator action
(:func:`audit`, which the admin store calls for every audited change). Never one per successful
job: the hot path does not know this module. Serving processes follow the feed by cursor
(:class:`EventFeed`); each row names the Storage that wrote it (``Origin``), so a process skips
its own rows, whose events its in-process bus already carried. The sweep bounds it (:func:`purge`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, insert, null

from chokaq.domain import limits
from chokaq.storage.admin_types import Actor
from chokaq.storage.dialects import profile_of
from chokaq.storage.schema import audit_log
from chokaq.storage.sqlfuncs import utcnow
from chokaq.storage.statements import feed as sf

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

    from chokaq.storage.store import Storage

log = logging.getLogger("chokaq.storage")

#: Ids an event carries (the Deck links them); the count says how many there were.
MAX_EVENT_IDS = 50
#: Rows one follower read returns; a follower that is further behind reads again at once.
READ_LIMIT = 500

#: Who the audit log names for the sweep's rescues and the feed's purges, whichever process ran them.
SYSTEM_SWEEP = Actor("system:sweep", "admin")

_origins: weakref.WeakKeyDictionary[Engine, str] = weakref.WeakKeyDictionary()
_PROCESS_ORIGIN = f"{socket.gethostname()[:30]}:{os.getpid()}"


def new_origin(engine: Engine) -> str:
    """A name for the rows one Storage writes through ``engine`` (host, pid and a random part: two
    apps in one process, or a restarted process, are told apart)."""
    origin = f"{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    _origins[engine] = origin
    return origin


def origin_of(conn: Connection) -> str:
    return _origins.get(conn.engine, _PROCESS_ORIGIN)


def record(conn: Connection, kind: str, data: dict[str, Any]) -> None:
    """Inside the caller's transaction: one feed row, committed (and announced) with the change."""
    params = {"feed_kind": kind, "feed_origin": origin_of(conn), "feed_data": json.dumps(data, default=str)}
    conn.execute(sf.feed_insert_statement(), params)
    profile_of(conn.dialect).notify_events(conn)


def audit_row(
    conn: Connection, actor: Actor, action: str, job_ids: Sequence[str], details: dict[str, Any] | None = None
) -> None:
    """One AuditLog row in the caller's transaction (no feed row: see :func:`audit`)."""
    conn.execute(
        insert(audit_log).values(
            AtUtc=utcnow(),
            Actor=actor.name,
            Role=actor.role,
            Action=action,
            JobIds=json.dumps(list(job_ids)[: limits.MAX_BULK_IDS]),
            JobCount=len(job_ids),
            Details=json.dumps(details, default=str) if details else null(),  # in the text: nulls.py
        )
    )


def audit(
    conn: Connection, actor: Actor, action: str, job_ids: Sequence[str], details: dict[str, Any] | None = None
) -> None:
    """An operator's (or the system's) action: its AuditLog row and its feed row, in one transaction."""
    audit_row(conn, actor, action, job_ids, details)
    data: dict[str, Any] = {"action": action, "actor": actor.name, "count": len(job_ids)}
    if job_ids:
        data["ids"] = list(job_ids)[:MAX_EVENT_IDS]
    for key in ("failure_reason", "queue", "deleted", "verdict"):
        if details and key in details:
            data[key] = details[key]
    record(conn, "audit", data)


@dataclass(frozen=True)
class FeedRow:
    id: int
    at: datetime  # naive UTC, the database's clock
    kind: str
    origin: str
    data: dict[str, Any]


def _rows(result: Any) -> list[FeedRow]:
    out = []
    for r in result:
        try:
            data = json.loads(r[4]) if r[4] else {}
        except ValueError:
            data = {}
        out.append(FeedRow(int(r[0]), r[1], str(r[2]), str(r[3]), data if isinstance(data, dict) else {}))
    return out


def read_after(conn: Connection, cursor: int, limit: int = READ_LIMIT) -> list[FeedRow]:
    """Rows after ``cursor``, oldest first: one range read on the primary key."""
    return _rows(conn.execute(sf.feed_after_statement(limit), {"feed_after": cursor}))


def read_latest(conn: Connection, limit: int) -> list[FeedRow]:
    """The newest ``limit`` rows, oldest first."""
    return list(reversed(_rows(conn.execute(sf.feed_latest_statement(limit)))))


def head(conn: Connection) -> int:
    """The newest id, 0 on an empty feed."""
    value = conn.execute(sf.feed_head_statement()).scalar()
    return int(value or 0)


def purge_batch(conn: Connection, *, max_age: float, max_rows: int, size: int) -> tuple[int, int]:
    """One bounded batch of each purge, in the caller's transaction: ``(by age, by count)`` deleted."""
    aged = int(conn.execute(sf.feed_purge_age_statement(max_age, size)).rowcount or 0)
    counted = int(conn.execute(sf.feed_purge_count_statement(size), {"feed_keep": max_rows}).rowcount or 0)
    return aged, counted


def purge_events(storage: Storage, *, max_age: float, max_rows: int, size: int | None = None) -> int:
    """Bound the feed: rows older than ``max_age`` seconds and rows beyond the newest ``max_rows``,
    deleted ``size`` (Storage.CleanupBatchSize, at most what one statement may lock on this
    database) at a time. Returns how many were deleted.

    Not audited: the feed is a bounded notice board, and an AuditLog row per purge batch would move
    its growth into a table nothing purges. A log line says what went."""
    batch = storage.profile.statement_rows(size or storage.settings.cleanup_batch_size)
    total = 0
    while True:

        def work(c: Connection) -> tuple[int, int]:
            return purge_batch(c, max_age=max_age, max_rows=max_rows, size=batch)

        aged, counted = storage.write(work, op="purge_events")
        total += aged + counted
        if aged or counted:
            log.info(
                "event feed: %d row(s) older than %gs and %d beyond the newest %d deleted",
                aged,
                max_age,
                counted,
                max_rows,
            )
        if aged < batch and counted < batch:
            return total


class EventFeed:
    """A serving process's reads of the feed (see chokaq/api/feed_follower.py)."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    @property
    def origin(self) -> str:
        """This storage's rows (its process already heard of them on its bus)."""
        return self.storage.origin

    def after(self, cursor: int, limit: int = READ_LIMIT) -> list[FeedRow]:
        return self.storage.read(lambda c: read_after(c, cursor, limit), op="feed_after")

    def latest(self, limit: int) -> list[FeedRow]:
        return self.storage.read(lambda c: read_latest(c, limit), op="feed_latest")

    def head(self) -> int:
        return self.storage.read(head, op="feed_head")

    @property
    def wakes(self) -> bool:
        """Whether :meth:`listen` can wake a follower at each commit (PostgreSQL's NOTIFY)."""
        return self.storage.supports_notify

    def listen(self, on_event: Callable[[], None], stop: threading.Event, listening: threading.Event) -> None:
        """Block until ``stop``, calling ``on_event`` after each commit that wrote feed rows."""
        from chokaq.storage.dialects.postgres_listen import listen_events

        listen_events(self.storage.url, on_event, stop, listening)
