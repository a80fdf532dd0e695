"""The heartbeat's failure count (Execution.HeartbeatFailureThreshold) counts failed beats of
running handlers only."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence

from sqlalchemy.exc import OperationalError

from chokaq.domain.models import Lease
from chokaq.runtime.heartbeat import Heartbeat
from chokaq.runtime.outage import Outage
from chokaq.settings import ExecutionSettings


def test_a_failed_beat_of_unsure_starts_alone_is_not_a_handler_failure() -> None:
    sent: list[list[Lease]] = []

    async def refused(leases: Sequence[Lease]) -> Collection[str]:
        sent.append(list(leases))
        raise OperationalError("heartbeat", {}, ConnectionRefusedError("refused"))

    outage = Outage(60.0)
    beat = Heartbeat(
        ExecutionSettings(heartbeat_failure_threshold=1, cancel_on_heartbeat_failure=True),
        outage,
        write=refused,
        running={},
        executing=set(),
        cancel=lambda run, reason: None,
        conflict=lambda transition, n: None,
        unsure=lambda: [Lease("j1", "w", 1)],
    )
    asyncio.run(beat.beat())
    assert sent == [[Lease("j1", "w", 1)]]  # the unsure lease was beaten ...
    assert outage.down_since is not None  # ... the outage noticed ...
    assert beat.failures == 0  # ... and no handler's beat failed
