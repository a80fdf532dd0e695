"""Deadlines: one timer per launch batch; only handlers still running when it passes expire."""

from __future__ import annotations

import asyncio

from chokaq.runtime.deadlines import Deadlines
from chokaq.runtime.running import Running
from tests.unit.test_slots import job, running


def test_only_the_handlers_still_running_at_the_deadline_expire() -> None:
    async def scenario() -> list[str]:
        expired: list[Running] = []
        deadlines = Deadlines(expired.append)
        runs = [running(job(n)) for n in range(3)]
        deadlines.watch(asyncio.get_running_loop(), runs, 0.05)
        deadlines.ended(runs[0])  # finished in time
        await asyncio.sleep(0.2)
        deadlines.ended(runs[1])  # ended after its deadline passed: already expired
        return [r.record.id for r in expired]

    assert asyncio.run(scenario()) == ["j1", "j2"]


def test_a_batch_whose_handlers_all_ended_cancels_its_timer_and_lets_go_of_its_jobs() -> None:
    async def scenario() -> tuple[list[Running], bool]:
        expired: list[Running] = []
        deadlines = Deadlines(expired.append)
        runs = [running(job(n)) for n in range(2)]
        deadlines.watch(asyncio.get_running_loop(), runs, 0.05)
        deadline = runs[0].deadline
        assert deadline is not None and deadline.timer is not None
        for r in runs:
            deadlines.ended(r)
        await asyncio.sleep(0.1)
        return expired, deadline.timer.cancelled() and all(r.deadline is None for r in runs)

    assert asyncio.run(scenario()) == ([], True)
