"""A handler's ``verify``: for each zombie the sweep just buried, where the handler's code is loaded
(a worker's own sweep, never the Functions timer or a sweep without handlers), ask
``verify(payload, steps)`` whether its work got done, and apply the answer (storage/verdicts.py):
``done`` to the archive, ``not_done`` back to Pending, ``unknown`` left for a human. Each verdict
is audited as ``system:verify``. A verify that raises, or answers anything else, counts as unknown.

``verify`` may be a plain function or an ``async def`` (its checks are often calls to an async
client): the sweep runs on a thread of its own, so an async one is run to completion there on an
event loop of its own, one zombie at a time, as a plain one is called."""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections import Counter
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, TypeVar

from chokaq.domain.states import FailureReason, Location
from chokaq.domain.steps import VERDICTS, Verdict
from chokaq.runtime.handlers import Handler
from chokaq.storage import AdminStore, Storage, load_steps, settle_verdict

log = logging.getLogger("chokaq.sweep")

T = TypeVar("T")


def verify_zombies(storage: Storage, handlers: Mapping[str, Handler], zombie_ids: Sequence[str]) -> Counter[str]:
    """Verdicts applied, by verdict."""
    if not any(h.verify is not None for h in handlers.values()):
        return Counter()
    admin = AdminStore(storage)
    counts: Counter[str] = Counter()
    for job_id in zombie_ids:
        rec = storage.get_job(job_id)
        if rec is None or rec.location is not Location.DLQ or rec.failure_reason is not FailureReason.ZOMBIE:
            continue
        handler = handlers.get(rec.type)
        if handler is None or handler.verify is None:
            continue
        verdict, note = _ask(handler, rec.payload, job_id, storage)
        if settle_verdict(admin, job_id, verdict, note):
            counts[verdict] += 1
    if counts:
        log.warning("ZombieRescue: verified %s", ", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    return counts


def _ask(handler: Handler, payload_text: str, job_id: str, storage: Storage) -> tuple[Verdict, str | None]:
    assert handler.verify is not None
    try:
        answer = handler.verify(handler.parse_payload(payload_text), load_steps(storage, job_id))
        if inspect.isawaitable(answer):
            answer = _complete(answer)
    except Exception as exc:
        log.warning("verify of zombie %s raised %s: left for a human", job_id, type(exc).__name__)
        return "unknown", f"verify raised {type(exc).__name__}"
    if answer not in VERDICTS:
        return "unknown", f"verify answered {str(answer)[:50]!r}, not one of {', '.join(VERDICTS)}"
    return answer, None


def _complete(awaitable: Awaitable[T]) -> T:
    """Run an async verify's answer to completion from this (synchronous) sweep: on a loop of its
    own, or on a thread of its own when this thread already runs a loop (``run_sweep`` called from
    async code), which ``asyncio.run`` refuses."""

    async def answer() -> T:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(answer())
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = asyncio.run(answer())
        except BaseException as exc:  # handed back to the sweep's thread, which judges it unknown
            box["error"] = exc

    thread = threading.Thread(target=run, name="chokaq-verify")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]
