"""The doorbell: after an enqueue commits, tell another process "work is due in queue X".

The database stays the only queue. A ring is a hint that lets a sleeping consumer (the Azure
Functions ``wake`` function) look now instead of at its next timer tick; the claim decides who runs
what, so a ring that is lost, late, repeated or duplicated can neither lose a job nor run one twice.

:class:`Doorbell` is the transport-free part, installed with ``Storage.add_announcer``: it coalesces
(at most one ring per queue per ``interval``, plus one trailing ring so that the last enqueue of a
burst is always announced) and sends from its own thread, so an enqueue never waits for the
transport and never fails because of it. Failed rings are logged (at most once a minute per queue)
and counted (``chokaq.doorbell.rings{outcome=failed}``). The Azure Storage queue sender lives in
``functions/doorbell.py`` (Azure SDK imports stay out of the engine).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping

from chokaq.telemetry import instruments

log = logging.getLogger("chokaq.doorbell")

ANY_QUEUE = "*"  # the queues are not known (e.g. a resurrect): "look at every queue"
FAILURE_LOG_INTERVAL = 60.0
# Azure Storage queue messages can be hidden for at most 7 days; a job due later is left to the
# drain timer (the backstop) instead of a ring.
MAX_DELAY = 7 * 86400.0 - 60.0

Send = Callable[[str, float], None]  # (queue, seconds until the ring should become visible)


class Doorbell:
    """Coalescing, best-effort ringer. Call it with ``{queue: delay_seconds}`` (an announcer)."""

    def __init__(
        self,
        send: Send,
        *,
        interval: float = 1.0,
        max_delay: float = MAX_DELAY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval <= 0:
            raise ValueError("doorbell interval must be > 0")
        self._send = send
        self.interval = interval
        self.max_delay = max_delay
        self._clock = clock
        self._cond = threading.Condition()
        self._now_pending: set[str] = set()  # queues with work due now, not yet rung
        self._later_pending: set[tuple[str, int]] = set()  # (queue, due-time slot) for delayed jobs
        self._later_sent: set[tuple[str, int]] = set()
        self._last_sent: dict[str, float] = {}
        self._last_failure_log: dict[str, float] = {}
        self._in_flight = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self.sent = 0
        self.failed = 0

    # ------------------------------------------------------------------ producer side
    def __call__(self, due: Mapping[str, float] | None) -> None:
        """The announcer: record what to ring and return at once (never raises, never blocks on I/O)."""
        now = self._clock()
        with self._cond:
            if self._closed:
                return
            for queue, delay in (due if due is not None else {ANY_QUEUE: 0.0}).items():
                if delay <= 0:
                    self._now_pending.add(queue)
                elif delay <= self.max_delay:
                    # One ring per queue per interval of due time, visible when that slot begins.
                    slot = math.ceil((now + delay) / self.interval)
                    if (queue, slot) not in self._later_sent:
                        self._later_pending.add((queue, slot))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="chokaq-doorbell", daemon=True)
                self._thread.start()
            self._cond.notify()

    # ------------------------------------------------------------------ sender thread
    def _take_ready(self, now: float) -> tuple[list[tuple[str, float]], float | None]:
        """Rings that may go now, and how long until the next one may (None: nothing waits)."""
        ready: list[tuple[str, float]] = []
        wait: float | None = None
        for queue in sorted(self._now_pending):
            free_at = self._last_sent.get(queue, -math.inf) + self.interval
            if now >= free_at:
                ready.append((queue, 0.0))
                self._last_sent[queue] = now
                self._now_pending.discard(queue)
            else:
                wait = free_at - now if wait is None else min(wait, free_at - now)
        for queue, slot in sorted(self._later_pending):
            ready.append((queue, max(0.0, slot * self.interval - now)))
            self._later_sent.add((queue, slot))
        self._later_pending.clear()
        self._later_sent = {(q, s) for q, s in self._later_sent if s * self.interval > now}
        return ready, wait

    def _run(self) -> None:
        while True:
            with self._cond:
                ready, wait = self._take_ready(self._clock())
                while not ready:
                    if self._closed and wait is None:
                        return
                    self._cond.wait(timeout=wait)
                    ready, wait = self._take_ready(self._clock())
                self._in_flight += len(ready)
            for queue, delay in ready:
                self._ring(queue, delay)
                with self._cond:
                    self._in_flight -= 1
                    self._cond.notify_all()

    def _ring(self, queue: str, delay: float) -> None:
        try:
            self._send(queue, delay)
        except Exception as exc:
            self.failed += 1
            instruments().doorbell_rings.add(1, {"queue": queue, "outcome": "failed"})
            now = self._clock()
            if now - self._last_failure_log.get(queue, -math.inf) >= FAILURE_LOG_INTERVAL:
                self._last_failure_log[queue] = now
                # The type and first line only: SDK errors can carry request URLs with signatures.
                first = str(exc).splitlines()[0][:200] if str(exc) else ""
                log.warning(
                    "doorbell ring for queue %r failed (the jobs are stored; the drain timer or "
                    "the next ring picks them up): %s %s",
                    queue,
                    type(exc).__name__,
                    first,
                )
            return
        self.sent += 1
        instruments().doorbell_rings.add(1, {"queue": queue, "outcome": "sent"})

    # ------------------------------------------------------------------ lifecycle
    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every recorded ring has been attempted (trailing rings included)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._cond.notify_all()
            while self._now_pending or self._later_pending or self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(timeout=min(left, 0.05))
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Send what is pending (best effort), then stop the thread."""
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._now_pending.clear()
            self._later_pending.clear()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
