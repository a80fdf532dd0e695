"""The replay loop: a call replayed whole on transient errors, and the lost-reply rule, written once
for both transports (database threads: transactions.py; the worker's event loop: loop_transport.py).

A call is attempted up to ``transient_retries`` + 1 times. Before each attempt the test hook
``fault_injector`` is called with the operation name; a driver error from the hook or the attempt is
replayed after a growing, jittered delay while it is transient (engine.py's ``is_transient``) and
replays are left, and raised otherwise. An attempt that failed after its statement went out
(``sending``), in a way that may have come after the server committed (a broken connection, not an
answer from the server), may have committed behind a lost reply: the call is then ambiguous, and the
caller reconciles (see lost_replies.py and the worker's reconciler).

:class:`Replay` holds the loop and its decisions and does no I/O; its two trampolines,
:meth:`Replay.run` (a blocking call, on a database thread) and :meth:`Replay.run_async` (a
coroutine, on the worker's loop), do the calls and the waits. The transports own connections only.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy.exc import DBAPIError

from chokaq.settings import StorageSettings
from chokaq.storage.dialects import profile_of
from chokaq.storage.engine import is_transient

log = logging.getLogger("chokaq.storage")
T = TypeVar("T")


@dataclass
class Ambiguity:
    """Whether a write may have committed behind a lost reply (see :meth:`Replay.run`)."""

    ambiguous: bool = False


def may_have_committed(exc: BaseException) -> bool:
    """A failure that may have come after the server committed: the connection broke or timed out.
    Deadlocks, serialisation failures and other answers from the server rolled back for sure."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate:
        return sqlstate.startswith("08")  # connection exceptions
    return True


class ReplayPolicy:
    """One Storage's replay policy, shared by its two transports: how many replays, how long
    between them, which failures may have committed unheard, and the test hook."""

    def __init__(self, settings: StorageSettings, dialect: str) -> None:
        self.settings = settings
        # Where no connection can be lost (an embedded database), a failure always rolled back.
        self.replies_can_be_lost = profile_of(dialect).lost_replies
        # Test hook: called with the operation name before each attempt.
        self.fault_injector: Callable[[str], None] | None = None

    def unheard(self, exc: BaseException) -> bool:
        """A failure of a statement already sent that may have committed behind a lost reply
        (never where there is no connection to lose)."""
        return self.replies_can_be_lost and may_have_committed(exc)

    def delay(self, exc: BaseException, attempt: int, *, op: str) -> float:
        """How long to wait before replaying a call whose ``attempt`` (from 0) failed with ``exc``;
        raises ``exc`` when it is not to be replayed (not transient, or the replays are used up)."""
        if attempt >= self.settings.transient_retries or not is_transient(exc):
            raise exc
        delay: float = min(0.05 * 2.0**attempt, 2.0) * (0.5 + random.random())
        log.warning(
            "transient database error in %s (attempt %d), retrying in %.2fs: %s",
            op,
            attempt + 1,
            delay,
            str(exc).splitlines()[0],
        )
        return delay


class Replay:
    """One call's replays under ``policy``. ``lost`` is called when an attempt may have committed
    behind a lost reply (a transport records it where its callers look: a thread's ambiguity
    blocks, or the :class:`Ambiguity` a call on the loop was handed)."""

    def __init__(self, policy: ReplayPolicy, op: str, lost: Callable[[], None]) -> None:
        self.policy = policy
        self.op = op
        self._lost = lost
        # The current attempt's statement went out: from then on a failure may come after the
        # server ran it. Set by the transport (sending), reset before each attempt.
        self.sent = False
        # An earlier attempt of this call may have committed behind a lost reply: the attempts
        # after it look before they write (only enqueues ask, see Transactions.replaying).
        self.unheard = False
        self._failure: DBAPIError | None = None

    def sending(self) -> None:
        """Inside an attempt: a statement is about to reach the server."""
        self.sent = True

    def _attempts(self) -> Iterator[float]:
        """The loop: yields once per attempt, the seconds to wait before it (0 before the first).
        A trampoline that stores a failed attempt's error in ``_failure`` asks for the next one;
        the loop ends by raising that error when it is not to be replayed."""
        attempt = 0
        wait = 0.0
        while True:
            self.sent = False
            yield wait
            exc, self._failure = self._failure, None
            if exc is None:  # the trampoline returned: nothing to replay
                return
            if self.sent and self.policy.unheard(exc):
                # The connection died under a write: it may have committed, and the reply was
                # lost. The replay cannot tell; callers that care reconcile.
                self.unheard = True
                self._lost()
            wait = self.policy.delay(exc, attempt, op=self.op)
            attempt += 1

    def run(self, once: Callable[[], T]) -> T:
        """Call ``once`` until it succeeds, a non-transient error, or the replays are used up,
        blocking this thread between attempts."""
        for wait in self._attempts():
            if wait:
                time.sleep(wait)
            try:
                injector = self.policy.fault_injector
                if injector is not None:
                    injector(self.op)
                return once()
            except DBAPIError as exc:
                self._failure = exc
        raise AssertionError("unreachable")

    async def run_async(self, once: Callable[[], Awaitable[T]]) -> T:
        """:meth:`run` on the running event loop. A cancel while a statement is out (a worker
        task cancelled mid-claim) leaves the call ambiguous: it may still commit, and nobody will
        read its reply."""
        for wait in self._attempts():
            if wait:
                await asyncio.sleep(wait)
            try:
                injector = self.policy.fault_injector
                if injector is not None:
                    # Off the loop: a hook that sleeps plays a slow database, which the loop
                    # awaits, as the threads' calls would be awaited; it must not stall the loop.
                    await asyncio.to_thread(injector, self.op)
                return await once()
            except DBAPIError as exc:
                self._failure = exc
            except asyncio.CancelledError:
                if self.sent:
                    self._lost()
                raise
        raise AssertionError("unreachable")
