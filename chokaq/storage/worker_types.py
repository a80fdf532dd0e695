"""What a worker's writes take and give back: a success to archive, a start's result."""

from __future__ import annotations

from dataclasses import dataclass

from chokaq.domain.models import JobRecord, Lease
from chokaq.storage.job_notes import Notes


@dataclass(frozen=True, slots=True)
class Completion:
    lease: Lease
    duration_ms: int
    notes: Notes | None = None  # what the handler logged that the row lacks (chokaq.domain.job_logs)


@dataclass(frozen=True, slots=True)
class StartResult:
    started: list[JobRecord]
    released: list[str]
    lost: list[str]
