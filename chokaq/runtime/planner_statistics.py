"""Storage.RefreshStatistics, the worker's side: after a burst into a new or quiet JobsHot,
PostgreSQL plans every claim as a read and sort of the whole backlog until the table is analysed
again; autovacuum may take a minute or more. The worker checks at start, then about every second
while its claims come back full (a backlog: bursts show up so), else every ten seconds. The check
is one cheap read; the storage decides whether to analyse."""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable

from chokaq.runtime.outage import Outage
from chokaq.storage import WorkerStore

STATISTICS_CHECK_SECONDS = 1.0
STATISTICS_IDLE_CHECK_SECONDS = 10.0


async def refresh_statistics_forever(store: WorkerStore, outage: Outage, *, backlog: Callable[[], bool]) -> None:
    last = -math.inf
    while True:
        if backlog() or time.monotonic() - last >= STATISTICS_IDLE_CHECK_SECONDS:
            last = time.monotonic()
            try:
                await store.refresh_statistics()
            except Exception as exc:  # an optimisation: never let it stop the worker
                outage.failed("statistics check", exc)
        await asyncio.sleep(random.uniform(0.8, 1.2) * STATISTICS_CHECK_SECONDS)
