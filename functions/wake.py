"""``wake``: the doorbell's queue-triggered function. A ring starts a short drain slice.

The message is only a hint. The slice claims through the same fenced storage calls, with the same
heartbeats, as every worker, and ends when idle (``CHOKAQ_DRAIN_IDLE_SECONDS``) or at its time box.
So a ring that is retried, duplicated, arrives late or is garbage runs nothing twice and loses
nothing: the claim decides which worker runs a job, and the drain timer stays the backstop.

Content is never a reason to fail the invocation (that would only send the message to the poison
queue after five tries); a database error is, and the host then retries the ring.
"""

from __future__ import annotations

import logging
import time

import azure.functions as func

from chokaq import telemetry
from functions.doorbell import CONNECTION, QUEUE_SETTING, parse
from functions.drain import Slices

log = logging.getLogger("chokaq.functions.wake")


def blueprint(slices: Slices) -> func.Blueprint:
    bp = func.Blueprint()  # type: ignore[no-untyped-call]

    @bp.function_name("wake")
    @bp.queue_trigger(arg_name="msg", queue_name=f"%{QUEUE_SETTING}%", connection=CONNECTION)
    async def wake(msg: func.QueueMessage) -> None:
        """Run a short drain slice because a producer rang: work is due."""
        ring = parse(msg.get_body().decode("utf-8", errors="replace"))
        if not ring.understood:
            log.warning("doorbell message %s not understood; draining every queue anyway", msg.id)
        lag = f"{time.time() - ring.at:.3f}s after the ring" if ring.at is not None else "ring time unknown"
        trigger = f"wake (queue {ring.queue!r}, {lag}, delivery {msg.dequeue_count})"
        log.debug("%s: starting a drain slice", trigger)  # the slice's summary is the ring's one line
        ours = telemetry.configure("chokaq-functions")
        try:
            with telemetry.tracer().start_as_current_span("chokaq.wake") as span:
                span.set_attribute("chokaq.queue", ring.queue)
                stats = await slices.run(trigger)
                span.set_attribute("chokaq.extended", stats is None)
        finally:
            if ours:
                telemetry.shutdown()

    return bp
