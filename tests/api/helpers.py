"""Builders shared by the API and Functions tests: apps with tokens, dead and archived jobs, a
worker run in a thread until a condition holds."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Callable
from typing import Any

from chokaq import ChokaQ
from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import FailureReason
from chokaq.storage import Storage
from chokaq.storage.store import Completion

ADMIN_TOKEN = "admin-token-0123456789"
OPERATOR_TOKEN = "operator-token-0123456789"
VIEWER_TOKEN = "viewer-token-0123456789"

TOKENS: dict[str, dict[str, str]] = {
    ADMIN_TOKEN: {"name": "admin@example.com", "role": "admin"},
    # Stored as a hash, the way a deployment should keep it.
    "sha256:" + hashlib.sha256(OPERATOR_TOKEN.encode()).hexdigest(): {"name": "ops@example.com", "role": "operator"},
    VIEWER_TOKEN: {"name": "viewer@example.com", "role": "viewer"},
}
HEADERS = {
    "admin": {"Authorization": f"Bearer {ADMIN_TOKEN}"},
    "operator": {"Authorization": f"Bearer {OPERATOR_TOKEN}"},
    "viewer": {"Authorization": f"Bearer {VIEWER_TOKEN}"},
    "anonymous": {},
}


def make_app(url: str, **overrides: Any) -> ChokaQ:
    admin = {"tokens": TOKENS, **overrides.pop("admin", {})}
    storage = {
        "polling_interval": 0.05,
        "idle_polling_interval": 0.1,
        "transient_retries": 2,
        **overrides.pop("storage", {}),
    }
    app = ChokaQ(storage_url=url, admin=admin, storage=storage, **overrides)
    app.storage.upgrade()
    return app


def enqueue(storage: Storage, type: str = "t", payload: str = "{}", queue: str = "default", **kw: Any) -> str:
    job_id, _ = storage.enqueue(EnqueueRequest(type=type, payload=payload, queue=queue, **kw))
    return job_id


def run_one(storage: Storage, job_id: str, worker: str = "w-test") -> Any:
    """Claim and start exactly this job (it must be the only due one in its queue)."""
    job = storage.get_job(job_id)
    assert job is not None
    claimed = storage.fetch(worker, 1000, [job.queue])
    rec = next(r for r in claimed if r.id == job_id)
    others = [r.lease for r in claimed if r.id != job_id]
    if others:
        storage.release(worker, others)
    res = storage.start(worker, [rec])
    return res.started[0]


def make_dead(
    storage: Storage,
    n: int = 1,
    *,
    type: str = "t",
    queue: str = "default",
    reason: FailureReason = FailureReason.FATAL_ERROR,
    details: str = "boom",
    payload: str = "{}",
) -> list[str]:
    """n jobs moved Pending -> Processing -> DLQ through the worker's own storage calls."""
    ids = [enqueue(storage, type=type, queue=queue, payload=payload) for _ in range(n)]
    claimed = storage.fetch("w-dead", n + 1000, [queue])
    wanted = [r for r in claimed if r.id in set(ids)]
    others = [r for r in claimed if r.id not in set(ids)]
    if others:
        storage.release("w-dead", [r.lease for r in others])
    started = storage.start("w-dead", wanted).started
    for rec in started:
        assert storage.fail(rec.lease, reason, details)
    return ids


def make_archived(storage: Storage, n: int = 1, *, queue: str = "done") -> list[str]:
    ids = [enqueue(storage, queue=queue) for _ in range(n)]
    claimed = storage.fetch("w-done", n + 1000, [queue])
    started = storage.start("w-done", [r for r in claimed if r.id in set(ids)]).started
    assert storage.complete("w-done", [Completion(r.lease, 1) for r in started]) == set(ids)
    return ids


def failed_total(storage: Storage, queue: str) -> int:
    return next((s.failed_total for s in storage.queue_stats() if s.queue == queue), 0)


def run_worker_until(app: ChokaQ, done: Callable[[], bool], *, timeout: float = 30.0, **kw: Any) -> Any:
    """Run ``app.worker(**kw)`` in a thread until ``done()`` (polled) or the deadline; then stop it."""
    w = app.worker(**kw)
    errors: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(w.run_async())
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    t = threading.Thread(target=target, name="test-worker", daemon=True)
    t.start()
    deadline = time.monotonic() + timeout
    try:
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not reached within {timeout}s (worker stats {w.stats})")
            if errors:
                raise errors[0]
            time.sleep(0.02)
    finally:
        w.stop()
        t.join(60)
    assert not t.is_alive(), "worker did not stop"
    if errors:
        raise errors[0]
    return w


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)
