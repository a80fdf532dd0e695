"""The heartbeat's failure count (Execution.HeartbeatFailureThreshold) counts failed beats of
running handlers only."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence

from sqlalchemy.exc import OperationalError

from chokaq.domain.models import Lease
from chokaq.runtime.heartbeat import Heartbeat
from chokaq.runtime.outage import Outage
from chokaq.runtime.running import Running
from chokaq.runtime.worker_stats import Transition
from chokaq.settings import ExecutionSettings


def test_a_failed_beat_of_unsure_starts_alone_is_not_a_handler_failure() -> None:
    sent: list[list[Lease]] = []

    async def refused(leases: Sequence[Lease]) -> Collection[str]:
        sent.append(list(leases))
        raise OperationalError("heartbeat", {}, ConnectionRefusedError("refused"))

    class Store:
        heartbeat = staticmethod(refused)

    class Runs:  # no handler runs; one start may have committed unheard
        running: dict[str, Running] = {}
        executing: set[str] = set()

        def unsure_leases(self) -> list[Lease]:
            return [Lease("j1", "w", 1)]

        def conflict(self, transition: Transition, n: int = 1) -> None:
            pass

    outage = Outage(60.0)
    beat = Heartbeat(
        ExecutionSettings(heartbeat_failure_threshold=1, cancel_on_heartbeat_failure=True),
        outage,
        store=Store(),
        runs=Runs(),
    )
    asyncio.run(beat.beat())
    assert sent == [[Lease("j1", "w", 1)]]  # the unsure lease was beaten ...
    assert outage.down_since is not None  # ... the outage noticed ...
    assert beat.failures == 0  # ... and no handler's beat failed
