"""The replay loop (storage/replay.py) without a database: its two trampolines, the blocking one of
the database threads and the coroutine of the worker's loop, follow the same policy."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from sqlalchemy.exc import DBAPIError

from chokaq.settings import StorageSettings
from chokaq.storage.replay import Replay, ReplayPolicy


class Script:
    """A call that fails ``failures`` times (after sending its statement when ``sent``), then
    answers; it records the hook's calls and its own, in order."""

    def __init__(self, failures: int, *, sent: bool, invalidated: bool = True) -> None:
        self.failures = failures
        self.sent = sent
        self.invalidated = invalidated
        self.log: list[str] = []
        self.lost = 0

    def policy(self, retries: int, dialect: str = "postgresql") -> ReplayPolicy:
        policy = ReplayPolicy(StorageSettings(transient_retries=retries), dialect)
        policy.fault_injector = lambda op: self.log.append(f"hook {op}")
        return policy

    def on_lost(self) -> None:
        self.lost += 1

    def once(self, sending: Callable[[], None]) -> str:
        self.log.append("call")
        if self.sent:
            sending()
        if self.failures:
            self.failures -= 1
            raise DBAPIError("stmt", {}, Exception("gone"), connection_invalidated=self.invalidated)
        return "rows"


Transport = Callable[[Script, ReplayPolicy], tuple[str, Replay]]


def blocking(script: Script, policy: ReplayPolicy) -> tuple[str, Replay]:
    replay = Replay(policy, "op", script.on_lost)
    return replay.run(lambda: script.once(replay.sending)), replay


def on_loop(script: Script, policy: ReplayPolicy) -> tuple[str, Replay]:
    replay = Replay(policy, "op", script.on_lost)

    async def once() -> str:
        return script.once(replay.sending)

    return asyncio.run(replay.run_async(once)), replay


@pytest.mark.parametrize("transport", [blocking, on_loop])
def test_a_transient_failure_is_replayed_with_the_hook_before_each_attempt(transport: Transport) -> None:
    script = Script(2, sent=False)
    result, replay = transport(script, script.policy(retries=2))
    assert result == "rows"
    assert script.log == ["hook op", "call"] * 3
    assert script.lost == 0 and not replay.unheard  # never sent: a clean failure


@pytest.mark.parametrize("transport", [blocking, on_loop])
def test_a_failure_after_the_statement_went_out_makes_the_call_ambiguous(transport: Transport) -> None:
    script = Script(1, sent=True)
    result, replay = transport(script, script.policy(retries=2))
    assert result == "rows"
    assert script.lost == 1 and replay.unheard


@pytest.mark.parametrize("transport", [blocking, on_loop])
def test_the_failure_is_raised_once_the_replays_are_used_up(transport: Transport) -> None:
    script = Script(5, sent=True)
    with pytest.raises(DBAPIError):
        transport(script, script.policy(retries=2))
    assert script.log.count("call") == 3 and script.lost == 3


@pytest.mark.parametrize("transport", [blocking, on_loop])
def test_a_failure_that_is_not_transient_is_raised_at_once(transport: Transport) -> None:
    script = Script(1, sent=True, invalidated=False)
    with pytest.raises(DBAPIError):
        transport(script, script.policy(retries=2))
    assert script.log == ["hook op", "call"]


@pytest.mark.parametrize("transport", [blocking, on_loop])
def test_sqlite_has_no_lost_replies(transport: Transport) -> None:
    script = Script(1, sent=True)
    transport(script, script.policy(retries=2, dialect="sqlite"))
    assert script.lost == 0


def test_a_call_cancelled_with_its_statement_out_is_ambiguous() -> None:
    lost: list[bool] = []
    policy = ReplayPolicy(StorageSettings(), "postgresql")

    async def main() -> None:
        replay = Replay(policy, "op", lambda: lost.append(True))
        out = asyncio.Event()

        async def once() -> None:
            replay.sending()
            out.set()
            await asyncio.sleep(10)

        task = asyncio.ensure_future(replay.run_async(once))
        await out.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert lost == [True]


def test_a_call_nested_in_another_on_one_thread_leaves_the_outer_call_its_own_bookkeeping() -> None:
    # A transaction function that itself runs a replayed call (an enqueue without conn= inside a
    # Storage.write): once the inner call has ended, the outer call's next attempt must still be
    # told when its statement goes out, or its lost reply would be taken for a clean failure.
    from psycopg import errors as pg_errors

    from chokaq.storage.thread_replays import ThreadReplays

    threads = ThreadReplays(ReplayPolicy(StorageSettings(transient_retries=2), "postgresql"))
    attempts = 0

    def outer() -> str:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            threads.retrying(lambda: threads.sending(writes=True), op="inner")
            # A clean refusal from the server (a serialisation failure): nothing committed.
            raise DBAPIError("stmt", {}, pg_errors.SerializationFailure("40001"), connection_invalidated=False)
        threads.sending(writes=True)
        if attempts == 2:
            raise DBAPIError("stmt", {}, Exception("gone"), connection_invalidated=True)  # the reply is lost
        assert threads.replaying(), "the third attempt follows one that may have committed"
        return "rows"

    with threads.ambiguity() as seen:
        assert threads.retrying(outer, op="outer") == "rows"
    assert seen.ambiguous and attempts == 3
