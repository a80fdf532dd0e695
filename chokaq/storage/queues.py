"""Queue rows: what this process remembers about them (which exist, which have MaxWorkers), and
reading and changing them."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Literal, TypeAlias

from sqlalchemy import Connection, Row, false, insert, select, update
from sqlalchemy.exc import IntegrityError

from chokaq.domain.models import QueueInfo
from chokaq.storage.nulls import inline_nulls
from chokaq.storage.schema import queues
from chokaq.storage.sqlfuncs import utcnow

# Seconds the list of MaxWorkers queues is trusted before it is read again.
LIMITED_QUEUE_TTL = 1.0
# conn.info key: which transaction created which queue rows on that connection (QueueCache.ensure).
_CREATED_IN = "chokaq_queue_rows_created_in"


class Unset(enum.Enum):
    """The default of a queue setting that the caller did not name (None means "clear it")."""

    UNSET = "unset"


UNSET: Final = Unset.UNSET
# A queue override: a value, None to clear it, or UNSET to leave it as it is.
Override: TypeAlias = int | Literal[Unset.UNSET] | None


def queue_info(r: Row[Any]) -> QueueInfo:
    return QueueInfo(
        name=r.Name,
        is_paused=bool(r.IsPaused),
        is_active=bool(r.IsActive),
        zombie_timeout_seconds=r.ZombieTimeoutSeconds,
        max_workers=r.MaxWorkers,
        last_updated_utc=r.LastUpdatedUtc,
    )


def read_queues(c: Connection) -> list[QueueInfo]:
    return [queue_info(r) for r in c.execute(select(queues).order_by(queues.c.Name)).all()]


def queue_values(paused: bool | None, zombie_timeout_seconds: Override, max_workers: Override) -> dict[str, Any]:
    """The Queues columns an update changes: only the settings named (LastUpdatedUtc always)."""
    values: dict[str, Any] = {"LastUpdatedUtc": utcnow()}
    if paused is not None:
        values["IsPaused"] = paused
    if zombie_timeout_seconds is not UNSET:
        values["ZombieTimeoutSeconds"] = zombie_timeout_seconds
    if max_workers is not UNSET:
        values["MaxWorkers"] = max_workers
    return values


class QueueCache:
    """Queue names known to have a row, and the queues with MaxWorkers (re-read at most every
    :data:`LIMITED_QUEUE_TTL` seconds). Per Storage; a stale entry only costs a claim's
    precision, never correctness (see :meth:`limited`)."""

    def __init__(self) -> None:
        self._known: set[str] = set()
        self._limited: tuple[float, list[str]] = (0.0, [])

    def knows(self, name: str) -> bool:
        """Whether this process has seen ``name``'s row (so :meth:`ensure` would do nothing)."""
        return name in self._known

    def ensure(self, conn: Connection, name: str) -> None:
        """Create the queue row unless this process has seen it.

        A row this transaction created is not known until it commits (:meth:`confirm`): a
        rollback takes the row with it, and a queue marked known would then get jobs and never
        its row. A row the SELECT finds and this transaction did not create is committed, and
        known from then on (a caller's own transactions, ``conn=``, are never confirmed).
        Within one transaction a queue is looked up once."""
        if name in self._known:
            return
        tx = conn.get_transaction()
        # Per driver connection: the transaction that created each queue's row here. Held, not
        # its id, so a new transaction can never pass for one that created a row and rolled back.
        created: dict[str, Any] = conn.info.setdefault(_CREATED_IN, {})
        if tx is not None and created.get(name) is tx:
            return  # created by this transaction, earlier: not committed yet, nothing to look up
        if conn.execute(select(queues.c.Name).where(queues.c.Name == name)).first() is not None:
            # Not this transaction's own row (that returned above): committed by someone.
            self._known.add(name)
            return
        try:
            with conn.begin_nested():
                conn.execute(insert(queues).values(Name=name, LastUpdatedUtc=utcnow()))
        except IntegrityError:
            pass  # another process created it first
        created[name] = tx

    def confirm(self, names: Iterable[str]) -> None:
        """The transaction that ensured ``names`` has committed: their rows exist."""
        self._known.update(names)

    def limited(self, read: Callable[[Callable[[Connection], list[str]]], list[str]]) -> list[str]:
        """Queues with MaxWorkers, re-read (through ``read``) at most every second: the list only
        decides which queues get a locked claim; the main claim excludes them exactly, by subquery."""
        stamp, names = self._limited
        if time.monotonic() - stamp > LIMITED_QUEUE_TTL:

            def work(c: Connection) -> list[str]:
                rows = c.execute(
                    select(queues.c.Name)
                    .where(queues.c.MaxWorkers.isnot(None), queues.c.IsPaused == false())
                    .order_by(queues.c.Name)
                ).all()
                return [r[0] for r in rows]

            names = read(work)
            self._limited = (time.monotonic(), names)
        return names

    def limited_if_known(self) -> list[str] | None:
        """The MaxWorkers queues without a read: None when the list is due for its re-read."""
        stamp, names = self._limited
        return None if time.monotonic() - stamp > LIMITED_QUEUE_TTL else names

    def pin_limited(self, names: Sequence[str], *, for_seconds: float) -> None:
        """Take ``names`` as the MaxWorkers queues for ``for_seconds``, without reading them (tests
        that count a claim's statements pin the list so no re-read lands among them)."""
        self._limited = (time.monotonic() + for_seconds - LIMITED_QUEUE_TTL, list(names))

    def forget(self, name: str) -> None:
        """A queue is about to change: its row is ensured again and the MaxWorkers list re-read."""
        self._known.discard(name)
        self._limited = (0.0, [])

    def change(self, c: Connection, name: str, values: dict[str, Any]) -> QueueInfo:
        """Create the queue row if needed, apply ``values`` (see :func:`queue_values`), read it back."""
        self.forget(name)
        self.ensure(c, name)
        c.execute(update(queues).where(queues.c.Name == name).values(**inline_nulls(values)))
        return queue_info(c.execute(select(queues).where(queues.c.Name == name)).one())
