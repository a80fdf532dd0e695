"""The retention run: archived jobs older than Retention.ArchiveDays and, when Retention.DlqDays is
set, dead jobs older than that, deleted in bounded batches (Storage.CleanupBatchSize) and audited
as the system actor that runs it. The Functions ``retention`` timer and ``chokaq retention`` call it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from chokaq.operations.service import Operations
from chokaq.storage import Actor

#: Who the audit log names for a retention run outside Functions (`chokaq retention`).
SYSTEM_RETENTION = Actor("system:retention", "admin")


@dataclass(frozen=True)
class RetentionResult:
    archive_deleted: int
    archive_cutoff: datetime
    dlq_deleted: int
    dlq_cutoff: datetime | None  # None: Retention.DlqDays is unset, the DLQ was left alone

    def as_dict(self) -> dict[str, object]:
        return {
            "archive_deleted": self.archive_deleted,
            "archive_older_than": self.archive_cutoff.isoformat() + "Z",
            "dlq_deleted": self.dlq_deleted,
            "dlq_older_than": None if self.dlq_cutoff is None else self.dlq_cutoff.isoformat() + "Z",
        }


def run_retention(ops: Operations, actor: Actor = SYSTEM_RETENTION, now: datetime | None = None) -> RetentionResult:
    """One retention run over both tables (``now``: naive UTC, default the clock)."""
    now = now or datetime.now(UTC).replace(tzinfo=None)
    settings = ops.app.settings.retention
    archive_cutoff = now - timedelta(days=settings.archive_days)
    archived = ops.purge_archive(actor, archive_cutoff)
    if settings.dlq_days is None:
        return RetentionResult(archived, archive_cutoff, 0, None)
    dlq_cutoff = now - timedelta(days=settings.dlq_days)
    return RetentionResult(archived, archive_cutoff, ops.purge_dlq_older(actor, dlq_cutoff), dlq_cutoff)
