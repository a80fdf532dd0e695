"""Replays on database threads: each thread's current call (see replay.py) and its record of lost
replies. A call runs on one thread from its first attempt to its last, so what a runner of
statements deep inside it reports (a statement is out) and what its caller asks afterwards (did a
write in this block perhaps commit unheard?) are kept per thread."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

from chokaq.storage.replay import Ambiguity, Replay, ReplayPolicy

T = TypeVar("T")


class ThreadReplays:
    """Calls replayed under ``policy`` on the calling thread. Thread-safe: the bookkeeping is per
    thread."""

    def __init__(self, policy: ReplayPolicy) -> None:
        self.policy = policy
        self._local = threading.local()  # .replay: the thread's current call; .ambiguous: see ambiguity

    def retrying(self, once: Callable[[], T], *, op: str) -> T:
        """Call ``once`` until it succeeds, a non-transient error, or ``transient_retries`` replays."""
        replay = Replay(self.policy, op, self._lost)
        # A call may run inside another's attempt on this thread (a transaction function that
        # enqueues without conn=): the outer call is the thread's current one again afterwards.
        outer: Replay | None = getattr(self._local, "replay", None)
        self._local.replay = replay
        try:
            return replay.run(once)
        finally:
            self._local.replay = outer

    def _lost(self) -> None:
        self._local.ambiguous = True  # on the call's own thread: see ambiguity()

    def sending(self, *, writes: bool) -> None:
        """Inside an attempt: a statement is about to reach the server. From here on a failed
        write may have run there. Every runner of statements inside :meth:`retrying` calls it, or a
        lost reply would be taken for a clean failure."""
        replay: Replay | None = getattr(self._local, "replay", None)
        if replay is not None:
            replay.sent = writes

    def replaying(self) -> bool:
        """Inside a call: an earlier attempt of it failed in a way that may have committed."""
        replay: Replay | None = getattr(self._local, "replay", None)
        return replay is not None and replay.unheard

    @contextlib.contextmanager
    def ambiguity(self) -> Iterator[Ambiguity]:
        """Tells whether a write in the block, on this thread, failed in a way that may have
        committed (a lost reply): the block's outcome may then include changes it never saw.
        Blocks nest: an enclosing block also learns what happened in an inner one."""
        outer = bool(getattr(self._local, "ambiguous", False))
        self._local.ambiguous = False
        seen = Ambiguity()
        try:
            yield seen
        finally:
            seen.ambiguous = bool(getattr(self._local, "ambiguous", False))
            self._local.ambiguous = outer or seen.ambiguous
