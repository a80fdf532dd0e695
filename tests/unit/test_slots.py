"""Slots: what a worker may claim or start, and the waits the fetch and start loops use."""

from __future__ import annotations

import asyncio

from chokaq.domain.models import JobRecord
from chokaq.domain.states import Location
from chokaq.runtime.handlers import JobContext
from chokaq.runtime.running import Running
from chokaq.runtime.slots import Slots


def job(n: int) -> JobRecord:
    return JobRecord(
        id=f"j{n}", location=Location.HOT, queue="default", type="t", payload="{}", tags=None,
        attempt_count=1, worker_id="w", created_by=None, last_modified_by=None, created_at_utc=None,
    )  # fmt: skip


def running(rec: JobRecord) -> Running:
    ctx = JobContext(job_id=rec.id, attempt=1, queue=rec.queue, type=rec.type, worker_id="w")
    return Running(record=rec, lease=rec.lease, ctx=ctx)


def slots(concurrency: int = 2, prefetch: int = 4, batch: int = 2) -> Slots:
    return Slots(concurrency=concurrency, prefetch=prefetch, batch=batch)


def test_idle_slots_are_claimed_straight_into_processing_by_either_fetcher_only_with_a_backlog() -> None:
    s = slots()
    assert s.claim_size(primary=True) == (2, True)
    assert s.claim_size(primary=False) is None  # no backlog: the second fetcher waits
    s.claimed(2, 2)
    assert s.backlog and s.claim_size(primary=False) == (2, True)


def test_with_every_slot_taken_the_primary_fills_the_buffer_up_to_the_lookahead() -> None:
    s = slots()
    for n in range(2):
        s.launched(running(job(n)))
    assert s.free() == 0 and s.claim_size(primary=False) is None
    assert s.claim_size(primary=True) == (2, False)
    with s.claiming(2, start=False):
        assert s.claim_size(primary=True) is None  # lookahead (2) reached by the claim in flight
    s.add_buffered([job(2), job(3)])
    assert s.claim_size(primary=True) is None and s.busy


def test_the_buffer_is_refilled_for_running_handlers_not_for_slots_claims_in_flight_hold() -> None:
    # A job buffered for a slot that a claim in flight will fill costs a second write (Fetched,
    # then its start) and sits reserved: on the no-op benchmark half the jobs took that path.
    s = slots(concurrency=4, prefetch=8, batch=2)  # lookahead 4
    with s.claiming(2, start=True), s.claiming(2, start=True):  # both fetchers' claims in flight
        assert s.free() == 0 and s.claim_size(primary=True) is None  # no handler running
    s.claimed(2, 2)
    with s.claiming(2, start=True):
        for n in range(2):
            s.launched(running(job(n)))  # two handlers run, a claim holds the other two slots
        assert s.free() == 0 and s.claim_size(primary=True) == (2, False)
        with s.claiming(2, start=False):
            assert s.claim_size(primary=True) is None  # as many queued as handlers run
        s.add_buffered([job(2), job(3)])
        s.launched(running(job(4)))
        s.launched(running(job(5)))
    # Four handlers run: the buffer may grow to the lookahead, as before.
    assert s.claim_size(primary=True) == (2, False)


def test_started_and_unwritten_jobs_are_bounded_by_twice_concurrency() -> None:
    # However large the prefetch buffer: one crash leaves at most 2 x Concurrency Processing rows.
    s = slots(concurrency=2, prefetch=10)
    for n in range(4):
        s.launched(running(job(n)))
        s.handler_ended(f"j{n}")  # handler returned; its outcome is not written yet
    assert s.free() == 0  # 4 held = 2 x Concurrency
    s.finished(["j0"])
    assert s.free() == 1


def test_a_starter_waits_for_a_slot_and_a_job_then_takes_what_fits() -> None:
    async def scenario() -> tuple[bool, list[str], set[str]]:
        s = slots(concurrency=1)
        s.launched(running(job(0)))
        s.add_buffered([job(1), job(2)])
        task = asyncio.create_task(s.jobs_to_start())
        await asyncio.sleep(0)
        waited = not task.done()  # no free slot yet
        s.handler_ended("j0")
        s.finished(["j0"])
        batch = await task
        return waited, [j.id for j in batch], s.in_start

    waited, batch, in_start = asyncio.run(scenario())
    assert waited and batch == ["j1"] and in_start == {"j1"}


def test_stopping_ends_every_wait_with_nothing_to_start() -> None:
    async def scenario() -> list[JobRecord]:
        s = slots()
        task = asyncio.create_task(s.jobs_to_start())
        await asyncio.sleep(0)
        s.stop()
        return await task

    assert asyncio.run(scenario()) == []


def test_a_stopping_worker_claims_nothing_even_when_a_full_claim_just_showed_a_backlog() -> None:
    # The race an earlier split opened: the primary's claim comes back full in the same loop turn
    # as SIGTERM; the second fetcher, woken by both, must not claim (and start) a batch after stop.
    s = slots()
    s.claimed(2, 2)
    assert s.backlog and s.claim_size(primary=False) == (2, True)
    s.stop()
    assert s.claim_size(primary=False) is None
    assert s.claim_size(primary=True) is None


def test_slots_held_by_unwritten_outcomes_are_not_claimed_into_the_buffer() -> None:
    # Two handlers run; six returned and wait for their outcomes to be written: the bound (2 x 4)
    # is reached by unwritten outcomes, whose slots come free when the completer's write returns.
    # A job buffered for them would only cost a second write (Fetched, then its start).
    s = slots(concurrency=4, prefetch=10)
    for n in range(8):
        s.launched(running(job(n)))
    for n in range(6):
        s.handler_ended(f"j{n}")
    assert s.free() == 0 and s.claim_size(primary=True) is None
    s.finished(["j0", "j1"])
    assert s.claim_size(primary=True) == (2, True)  # idle again: straight into Processing
