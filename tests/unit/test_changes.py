"""Changes: predicate waits that see every change, with no flag to clear."""

from __future__ import annotations

import asyncio

from chokaq.runtime.changes import Changes


def test_until_returns_at_once_when_the_predicate_already_holds() -> None:
    async def scenario() -> bool:
        return await Changes().until(lambda: True)

    assert asyncio.run(scenario()) is True


def test_every_waiter_rechecks_after_a_change() -> None:
    # Two waiters on one object, each for its own condition: one notify serves both, and neither
    # can consume the other's wake-up (as a shared asyncio.Event cleared by one waiter would).
    async def scenario() -> list[str]:
        changes = Changes()
        state = {"a": False, "b": False}
        woke: list[str] = []

        async def wait(name: str) -> None:
            await changes.until(lambda: state[name])
            woke.append(name)

        tasks = [asyncio.create_task(wait("a")), asyncio.create_task(wait("b"))]
        await asyncio.sleep(0)
        state["a"] = True
        changes.notify()
        await asyncio.sleep(0)
        state["b"] = True
        changes.notify()
        await asyncio.gather(*tasks)
        return woke

    assert asyncio.run(scenario()) == ["a", "b"]


def test_a_change_that_does_not_satisfy_the_predicate_keeps_waiting() -> None:
    async def scenario() -> tuple[bool, bool]:
        changes = Changes()
        n = [0]
        task = asyncio.create_task(changes.until(lambda: n[0] >= 2))
        for _ in range(2):
            await asyncio.sleep(0)
            n[0] += 1
            changes.notify()
            await asyncio.sleep(0)
            if n[0] == 1:
                first = task.done()
        return first, await task

    assert asyncio.run(scenario()) == (False, True)


def test_until_gives_up_after_its_timeout_and_leaves_no_waiter_behind() -> None:
    async def scenario() -> tuple[bool, int]:
        changes = Changes()
        held = await changes.until(lambda: False, timeout=0.01)
        return held, changes.waiting

    assert asyncio.run(scenario()) == (False, 0)


def test_a_cancelled_wait_leaves_no_waiter_behind() -> None:
    async def scenario() -> int:
        changes = Changes()
        task = asyncio.create_task(changes.until(lambda: False))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return changes.waiting

    assert asyncio.run(scenario()) == 0
