"""A handler's ``verify``: for each zombie the sweep just buried, where the handler's code is loaded
(a worker's own sweep, never the Functions timer or a sweep without handlers), ask
``verify(payload, steps)`` whether its work got done, and apply the answer (storage/verdicts.py):
``done`` to the archive, ``not_done`` back to Pending, ``unknown`` left for a human. Each verdict
is audited as ``system:verify``. A verify that raises, or answers anything else, counts as unknown."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence

from chokaq.domain.states import FailureReason, Location
from chokaq.domain.steps import VERDICTS, Verdict
from chokaq.runtime.handlers import Handler
from chokaq.storage import AdminStore, Storage, load_steps, settle_verdict

log = logging.getLogger("chokaq.sweep")


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
    except Exception as exc:
        log.warning("verify of zombie %s raised %s: left for a human", job_id, type(exc).__name__)
        return "unknown", f"verify raised {type(exc).__name__}"
    if answer not in VERDICTS:
        return "unknown", f"verify answered {str(answer)[:50]!r}, not one of {', '.join(VERDICTS)}"
    return answer, None  # type: ignore[return-value]
