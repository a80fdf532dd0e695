"""A worker's counters since it started."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Literal

from chokaq.telemetry import instruments

log = logging.getLogger("chokaq.worker")

# The moves a conflict can be counted for (WorkerStats.conflicts; the
# chokaq.state_transition.conflicts metric's ``transition`` attribute).
Transition = Literal["start", "heartbeat", "complete", "fail", "retry", "reschedule", "release"]


@dataclass
class WorkerStats:
    fetches: int = 0  # claims made (each one round trip, whatever it returned)
    started: int = 0  # handlers launched
    succeeded: int = 0  # successes the database recorded
    failed: int = 0  # jobs moved to the DLQ
    retried: int = 0  # jobs sent back to Pending for another attempt
    conflicts: int = 0  # stale moves: jobs this worker no longer owned

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def conflict(self, transition: Transition, n: int = 1) -> None:
        """Count ``n`` stale moves of one kind (the metric too, and a warning)."""
        if n:
            self.conflicts += n
            instruments().state_transition_conflicts.add(n, {"transition": transition})
            log.warning("%d stale %s move(s): this worker no longer owns the job(s)", n, transition)
