"""Execution.HealthFile, kept fresh: the worker rewrites it every few seconds, so that
`chokaq health` can tell a live worker from one that is gone or stuck (outage.HEALTH_STALE_SECONDS)."""

from __future__ import annotations

import asyncio

from chokaq.runtime.outage import Outage

HEALTH_WRITE_SECONDS = 5.0


async def write_health_forever(outage: Outage) -> None:
    while True:
        outage.write_health()
        await asyncio.sleep(HEALTH_WRITE_SECONDS)
