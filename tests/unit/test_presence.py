"""The worker's presence writes (runtime/presence.py): at most one per heartbeat tick, even while
the last one hangs; never in the way of the leases' heartbeat; a failure logged once."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Collection, Sequence
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from chokaq.domain.models import Lease
from chokaq.runtime.heartbeat import Heartbeat
from chokaq.runtime.outage import Outage
from chokaq.runtime.presence import Presence
from chokaq.runtime.running import Running
from chokaq.runtime.worker_stats import Transition
from chokaq.settings import ExecutionSettings
from tests.unit.test_heartbeat import _run


class Writes:
    """A Workers row's statements, recorded; ``gate`` (when set) holds each record until opened."""

    def __init__(self, *, fail: bool = False, gate: threading.Event | None = None) -> None:
        self.sent: list[tuple[str, int | None, bool]] = []
        self.fail = fail
        self.gate = gate

    def record(self, running: int, *, starting: bool = False) -> None:
        self.sent.append(("record", running, starting))
        if self.gate is not None:
            assert self.gate.wait(10)
        if self.fail:
            raise OperationalError("MERGE", {}, ConnectionRefusedError("refused: password=hunter2"))

    def stopped(self) -> None:
        self.sent.append(("stopped", None, False))
        if self.fail:
            raise OperationalError("UPDATE", {}, ConnectionRefusedError("refused"))


async def _on_thread(fn: Any, *args: Any, **kwargs: Any) -> None:
    await asyncio.to_thread(fn, *args, **kwargs)


class Store:
    def __init__(self) -> None:
        self.beats: list[list[Lease]] = []

    async def heartbeat(self, leases: Sequence[Lease]) -> Collection[str]:
        self.beats.append(list(leases))
        return {lease.job_id for lease in leases}

    async def cancelled_runs(self, leases: Sequence[Lease]) -> Collection[str]:
        return ()


class Runs:
    def __init__(self) -> None:
        run = _run("j1")
        self.running: dict[str, Running] = {"j1": run}
        self.executing = {"j1"}

    def unsure_leases(self) -> list[Lease]:
        return []

    def conflict(self, transition: Transition, n: int = 1) -> None:
        pass


def _heartbeat(presence: Presence, store: Store) -> Heartbeat:
    return Heartbeat(ExecutionSettings(), Outage(60.0), store=store, runs=Runs(), on_tick=presence.tick)


def test_a_tick_while_the_last_write_hangs_sends_nothing_and_the_leases_still_beat() -> None:
    gate = threading.Event()
    writes = Writes(gate=gate)
    store = Store()

    async def scenario() -> None:
        presence = Presence(writes, _on_thread, lambda: 1, "w")
        beat = _heartbeat(presence, store)
        await beat.tick()
        while not writes.sent:  # the first write reaches its (stuck) connection
            await asyncio.sleep(0.01)
        for _ in range(4):
            await beat.tick()
        # The first write hangs (a stuck connection): the four ticks after it sent nothing, and
        # every tick refreshed the leases all the same.
        assert writes.sent == [("record", 1, False)] and presence.writes == 1
        assert len(store.beats) == 5
        gate.set()
        await presence.stop()  # waits for the write in flight, then marks the row stopped
        assert writes.sent == [("record", 1, False), ("stopped", None, False)]
        await beat.tick()
        assert presence.writes == 2 and len(store.beats) == 6

    asyncio.run(scenario())


def test_failed_writes_are_logged_once_and_never_stop_the_heartbeat(caplog: pytest.LogCaptureFixture) -> None:
    writes = Writes(fail=True)
    store = Store()

    async def scenario() -> None:
        presence = Presence(writes, _on_thread, lambda: 0, "w")
        await presence.start()
        beat = _heartbeat(presence, store)
        for _ in range(4):
            await beat.tick()
            await asyncio.sleep(0)
            while presence._pending is not None and not presence._pending.done():
                await asyncio.sleep(0.01)
        await presence.stop()

    with caplog.at_level(logging.INFO, logger="chokaq.worker"):
        asyncio.run(scenario())
    assert [s[0] for s in writes.sent] == ["record"] * 5 + ["stopped"]  # each tick tried again
    assert len(store.beats) == 4  # the leases' heartbeat never missed a tick
    warnings = [r.getMessage() for r in caplog.records if "Workers was not written" in r.getMessage()]
    assert len(warnings) == 1 and "hunter2" not in warnings[0]


def test_a_write_that_succeeds_again_says_so() -> None:
    writes = Writes(fail=True)

    async def scenario() -> None:
        presence = Presence(writes, _on_thread, lambda: 0, "w")
        await presence.start()
        assert presence._failing
        writes.fail = False
        await presence.start()
        assert not presence._failing

    asyncio.run(scenario())


def test_a_hung_write_does_not_hold_a_clean_exit(caplog: pytest.LogCaptureFixture) -> None:
    gate = threading.Event()
    writes = Writes(gate=gate)

    async def scenario() -> None:
        presence = Presence(writes, _on_thread, lambda: 0, "w")
        presence.tick()
        while not writes.sent:
            await asyncio.sleep(0.01)
        await presence.stop(wait=0.05)  # returns although the tick's write never does
        assert writes.sent == [("record", 0, False)]  # not marked stopped behind a hung write
        gate.set()

    with caplog.at_level(logging.WARNING, logger="chokaq.worker"):
        asyncio.run(scenario())
    assert any("last presence write hangs" in r.getMessage() for r in caplog.records)
