"""Retention: finished jobs older than a cutoff deleted in bounded transactions, each audited in the
transaction that deletes its batch (:meth:`AdminStore.purge_archive`, :meth:`AdminStore.purge_dlq_older`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Column, Connection, Table

from chokaq.storage.admin_types import Actor
from chokaq.storage.statements import purge_older_statement
from chokaq.storage.statements.steps import purge_older_steps_statement

if TYPE_CHECKING:
    from chokaq.storage.store import Storage


class Audit(Protocol):
    def __call__(
        self, conn: Connection, actor: Actor, action: str, job_ids: Sequence[str], details: dict[str, Any] | None = None
    ) -> None: ...


def purge_older(
    storage: Storage,
    audit: Audit,
    *,
    table: Table,
    time_column: Column[Any],
    action: str,
    op: str,
    older_than: datetime,
    actor: Actor,
    batch_size: int | None = None,
    progress: Callable[[int], object] | None = None,
) -> int:
    """Delete ``table``'s rows whose ``time_column`` is before ``older_than``, oldest first, at most
    ``batch_size`` (Storage.CleanupBatchSize) per transaction; each batch writes one audit row
    ``action`` with the count. Returns how many were deleted."""
    # At most as many rows per statement as this database takes without escalating its locks.
    size = storage.tx.profile.statement_rows(batch_size or storage.settings.cleanup_batch_size)
    total = 0
    while True:

        def work(c: Connection) -> int:
            # The journals of the batch first (the same oldest rows): they go with their jobs.
            c.execute(purge_older_steps_statement(table, time_column, older_than, size))
            n = int(c.execute(purge_older_statement(table, time_column, older_than, size)).rowcount or 0)
            if n:
                audit(c, actor, action, [], {"older_than": older_than.isoformat(), "deleted": n, "batch_size": size})
            return n

        n = storage.write(work, op=op)
        total += n
        if progress is not None and n:
            progress(n)
        if n < size:
            return total
