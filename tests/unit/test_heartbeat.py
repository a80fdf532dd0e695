"""The heartbeat's failure count (Execution.HeartbeatFailureThreshold) counts failed beats of
running handlers only."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence

from sqlalchemy.exc import OperationalError

from chokaq.domain.models import Lease
from chokaq.runtime.heartbeat import Heartbeat
from chokaq.runtime.outage import Outage
from chokaq.runtime.running import Running
from chokaq.runtime.worker_stats import Transition
from chokaq.settings import ExecutionSettings


def test_a_failed_beat_of_unsure_starts_alone_is_not_a_handler_failure() -> None:
    sent: list[list[Lease]] = []

    async def refused(leases: Sequence[Lease]) -> Collection[str]:
        sent.append(list(leases))
        raise OperationalError("heartbeat", {}, ConnectionRefusedError("refused"))

    class Store:
        heartbeat = staticmethod(refused)

    class Runs:  # no handler runs; one start may have committed unheard
        running: dict[str, Running] = {}
        executing: set[str] = set()

        def unsure_leases(self) -> list[Lease]:
            return [Lease("j1", "w", 1)]

        def conflict(self, transition: Transition, n: int = 1) -> None:
            pass

    outage = Outage(60.0)
    beat = Heartbeat(
        ExecutionSettings(heartbeat_failure_threshold=1, cancel_on_heartbeat_failure=True),
        outage,
        store=Store(),
        runs=Runs(),
    )
    asyncio.run(beat.beat())
    assert sent == [[Lease("j1", "w", 1)]]  # the unsure lease was beaten ...
    assert outage.down_since is not None  # ... the outage noticed ...
    assert beat.failures == 0  # ... and no handler's beat failed


def _run(job_id: str, attempt: int = 1, worker: str = "w") -> Running:
    import dataclasses

    from chokaq.runtime.handlers import JobContext
    from tests.unit.test_outcomes import record

    rec = dataclasses.replace(record(attempt), id=job_id)
    return Running(rec, Lease(job_id, worker, attempt), JobContext(job_id, attempt, "q", "t", worker))


class _Runs:
    def __init__(self, *runs: Running) -> None:
        self.running = {r.lease.job_id: r for r in runs}
        self.executing = set(self.running)
        self.conflicts = 0

    def unsure_leases(self) -> list[Lease]:
        return []

    def conflict(self, transition: Transition, n: int = 1) -> None:
        self.conflicts += n


def test_a_lost_job_an_operator_cancelled_is_told_cancelled_the_others_lost_ownership() -> None:
    kept, cancelled, taken = _run("kept"), _run("cancelled"), _run("taken")
    asked: list[list[str]] = []

    class Store:
        async def heartbeat(self, leases: Sequence[Lease]) -> Collection[str]:
            return {"kept"}

        async def cancelled_runs(self, leases: Sequence[Lease]) -> Collection[str]:
            asked.append(sorted(lease.job_id for lease in leases))
            return {"cancelled"}

    runs = _Runs(kept, cancelled, taken)
    asyncio.run(Heartbeat(ExecutionSettings(), Outage(60.0), store=Store(), runs=runs).beat())
    assert asked == [["cancelled", "taken"]]  # only the lost ones are looked up
    assert (kept.ctx.cancel_reason, cancelled.ctx.cancel_reason, taken.ctx.cancel_reason) == (
        None,
        "cancelled",
        "lost_ownership",
    )
    assert runs.conflicts == 1  # an operator's cancel is not a state-transition conflict


def test_when_the_lookup_fails_a_lost_job_is_still_stopped() -> None:
    lost = _run("j")

    class Store:
        async def heartbeat(self, leases: Sequence[Lease]) -> Collection[str]:
            return set()

        async def cancelled_runs(self, leases: Sequence[Lease]) -> Collection[str]:
            raise OperationalError("lookup", {}, ConnectionRefusedError("refused"))

    asyncio.run(Heartbeat(ExecutionSettings(), Outage(60.0), store=Store(), runs=_Runs(lost)).beat())
    assert lost.ctx.cancel_reason == "lost_ownership" and lost.ctx.is_cancelled()


def test_a_cancel_notification_stops_only_the_run_it_names() -> None:
    import json

    target, other_attempt, finished = _run("a"), _run("b", attempt=2), _run("c")
    runs = _Runs(target, other_attempt, finished)
    runs.executing.discard("c")  # its handler has ended; its outcome is on the way
    beat = Heartbeat(ExecutionSettings(), Outage(60.0), store=object(), runs=runs)  # type: ignore[arg-type]
    for payload in (
        "not json",
        json.dumps({"id": "a"}),
        json.dumps({"id": "a", "worker": "someone else", "attempt": 1}),
        json.dumps({"id": "b", "worker": "w", "attempt": 1}),  # another attempt of b
        json.dumps({"id": "c", "worker": "w", "attempt": 1}),
        json.dumps({"id": "zz", "worker": "w", "attempt": 1}),  # not ours
    ):
        beat.operator_cancelled(payload)
    assert not any(r.ctx.is_cancelled() for r in (target, other_attempt, finished))
    beat.operator_cancelled(json.dumps({"id": "a", "worker": "w", "attempt": 1}))
    assert target.ctx.cancel_reason == "cancelled"
    assert not other_attempt.ctx.is_cancelled()
