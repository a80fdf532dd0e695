"""The producer's side on every database: the typed handle, ``at=``, bulk enqueue (all or none,
a result per job, idempotency keys) and async enqueue that never blocks the event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from pydantic import BaseModel, ValidationError
from sqlalchemy import event, func, select

from chokaq import ChokaQ, Enqueued, JobHandle, JobValidationError
from chokaq.settings import StorageSettings
from chokaq.storage.schema import jobs_hot

PARIS = ZoneInfo("Europe/Paris")


class Email(BaseModel):
    to: str
    subject: str = "hi"


class Other(BaseModel):
    number: int


@pytest.fixture
def app(db_url: str) -> Iterator[ChokaQ]:
    a = ChokaQ(storage_url=db_url, storage=StorageSettings(transient_retries=2))
    a.storage.upgrade()
    try:
        yield a
    finally:
        a.close()


def register(app: ChokaQ) -> JobHandle[Email, [Email], str]:
    @app.job("email_v1", queue="mail", payload=Email)
    def send(email: Email) -> str:
        return email.to

    return send


def stored(app: ChokaQ) -> int:
    return int(app.storage.read(lambda c: c.execute(select(func.count()).select_from(jobs_hot)).scalar_one()))


# ---------------------------------------------------------------------------- the typed handle
def test_the_handle_enqueues_its_type_on_its_queue_and_still_calls_the_handler(app: ChokaQ) -> None:
    send = register(app)
    assert send(Email(to="direct")) == "direct"
    assert send.__name__ == "send" and send.name == "email_v1"
    job_id = send.enqueue(Email(to="a@example.com"), priority=5, tags="t", idempotency_key="k1")
    rec = app.storage.get_job(job_id)
    assert rec is not None
    assert (rec.type, rec.queue, rec.priority, rec.tags, rec.idempotency_key) == ("email_v1", "mail", 5, "t", "k1")
    assert rec.payload_json() == {"to": "a@example.com", "subject": "hi"}
    assert send.enqueue(Email(to="again"), idempotency_key="k1") == job_id
    # The string form stays for producers that do not import the handlers.
    assert app.storage.get_job(app.enqueue("email_v1", {"to": "b"})) is not None


def test_a_payload_that_is_not_the_model_is_refused_before_anything_is_stored(app: ChokaQ) -> None:
    send = register(app)
    with pytest.raises(ValidationError):
        send.enqueue(Other(number=1))  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        send.enqueue_many([Email(to="ok"), Other(number=2)])  # type: ignore[list-item]
    assert stored(app) == 0


# ---------------------------------------------------------------------------- at=
def test_at_is_stored_as_its_utc_instant_across_a_dst_change(app: ChokaQ) -> None:
    send = register(app)
    # 2027-03-28: Paris goes from UTC+1 to UTC+2 at 02:00 local.
    before = datetime(2027, 3, 28, 1, 30, tzinfo=PARIS)
    after = datetime(2027, 3, 28, 3, 30, tzinfo=PARIS)
    # 2026-10-25 02:30 happens twice in Paris; fold=1 is the second (UTC+1).
    second = datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=PARIS)
    expected = [datetime(2027, 3, 28, 0, 30), datetime(2027, 3, 28, 1, 30), datetime(2026, 10, 25, 1, 30)]
    ids = [send.enqueue(Email(to="x"), at=at) for at in (before, after, second)]
    bulk = send.enqueue_many([Email(to="y")], at=after)
    for job_id, want in zip([*ids, bulk[0].id], [*expected, expected[1]], strict=True):
        rec = app.storage.get_job(job_id)
        assert rec is not None and rec.scheduled_at_utc is not None
        assert rec.scheduled_at_utc.replace(tzinfo=None, microsecond=0) == want


def test_at_refuses_a_naive_time_and_a_delay_with_it(app: ChokaQ) -> None:
    send = register(app)
    with pytest.raises(JobValidationError, match="timezone-aware"):
        send.enqueue(Email(to="x"), at=datetime(2026, 12, 24, 8, 0))
    with pytest.raises(JobValidationError, match="not both"):
        send.enqueue(Email(to="x"), at=datetime(2026, 12, 24, 8, 0, tzinfo=UTC), delay=5)
    with pytest.raises(JobValidationError, match="days ahead"):
        send.enqueue(Email(to="x"), at=datetime.now(UTC) + timedelta(days=400))
    assert stored(app) == 0


def test_a_job_at_a_past_time_is_due_now_and_one_in_the_future_is_not(app: ChokaQ) -> None:
    send = register(app)
    past = send.enqueue(Email(to="past"), at=datetime.now(UTC) - timedelta(hours=1))
    send.enqueue(Email(to="future"), at=datetime.now(UTC) + timedelta(hours=1))
    send.enqueue_many([Email(to="future2")], at=datetime.now(UTC) + timedelta(hours=1))
    assert [j.id for j in app.storage.fetch("w", 10)] == [past]


# ---------------------------------------------------------------------------- bulk
def test_ten_thousand_jobs_in_one_call(app: ChokaQ) -> None:
    send = register(app)
    out = send.enqueue_many([Email(to=f"{n}@example.com") for n in range(10_000)], tags="bulk")
    assert len(out) == 10_000 and all(e.created for e in out)
    assert len({e.id for e in out}) == 10_000
    assert stored(app) == 10_000
    rec = app.storage.get_job(out[9_999].id)
    assert rec is not None and rec.payload_json()["to"] == "9999@example.com" and rec.tags == "bulk"


def test_a_failure_midway_leaves_no_job_stored(app: ChokaQ) -> None:
    send = register(app)
    inserts = 0

    def fail_third_insert(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        nonlocal inserts
        if statement.lstrip().upper().startswith("INSERT INTO") and "JobsHot" in statement:
            inserts += 1
            if inserts == 3:
                raise RuntimeError("the database went away mid-batch")

    send.enqueue(Email(to="warm"))  # the queue row exists: the batch's first statements are INSERTs
    # Rows split into several statements (the SQLite and PostgreSQL bounds are large: lowered here).
    app.storage._batches.rows_per_statement = lambda at, keyed: 1000  # type: ignore[method-assign]
    event.listen(app.storage.engine, "before_cursor_execute", fail_third_insert)
    try:
        with pytest.raises(RuntimeError, match="mid-batch"):
            send.enqueue_many([Email(to=str(n)) for n in range(5_000)])
    finally:
        event.remove(app.storage.engine, "before_cursor_execute", fail_third_insert)
    assert inserts == 3
    assert stored(app) == 1


def test_idempotency_keys_inside_a_batch_and_against_stored_jobs(app: ChokaQ) -> None:
    send = register(app)
    existing = send.enqueue(Email(to="old"), idempotency_key="k-old")
    reqs = [
        send.prepare(Email(to="1"), idempotency_key="k-new"),
        send.prepare(Email(to="2")),
        send.prepare(Email(to="3"), idempotency_key="k-old"),
        send.prepare(Email(to="4"), idempotency_key="k-new"),
        send.prepare(Email(to="5"), idempotency_key="k-other", at=datetime.now(UTC) + timedelta(minutes=5)),
    ]
    out = app.enqueue_many(reqs)
    assert [e.created for e in out] == [True, True, False, False, True]
    assert out[2] == Enqueued(existing, False)
    assert out[3].id == out[0].id
    assert stored(app) == 4
    rec = app.storage.get_job(out[0].id)
    assert rec is not None and rec.payload_json()["to"] == "1"
    # The same batch again stores nothing and answers the same ids.
    # The same batch again: only the job without a key is stored again; the keyed ones answer
    # the jobs stored under their keys.
    again = app.enqueue_many(reqs)
    assert [e.created for e in again] == [False, True, False, False, False]
    assert [again[i].id for i in (0, 2, 3, 4)] == [out[0].id, existing, out[0].id, out[4].id]
    assert again[1].id != out[1].id
    assert stored(app) == 5


def test_not_atomic_stores_slice_by_slice(db_url: str) -> None:
    app = ChokaQ(storage_url=db_url, storage=StorageSettings(cleanup_batch_size=3))
    app.storage.upgrade()
    try:
        out = app.enqueue_many([app.prepare("t", {"n": n}) for n in range(10)], atomic=False)
        assert len(out) == 10 and stored(app) == 10
    finally:
        app.close()


def test_inside_the_callers_transaction_a_rollback_takes_the_jobs_with_it(app: ChokaQ) -> None:
    send = register(app)
    with app.storage.engine.connect() as conn:
        with conn.begin():
            out = send.enqueue_many([Email(to="a"), Email(to="b")], conn=conn)
            assert len(out) == 2
        assert stored(app) == 2
        trans = conn.begin()
        send.enqueue_many([Email(to="c")], conn=conn)
        trans.rollback()
    assert stored(app) == 2


# ---------------------------------------------------------------------------- async
def test_async_enqueue_never_blocks_the_event_loop(app: ChokaQ) -> None:
    """The database call is held (on the thread that runs it) until the loop has ticked three
    times: on the loop itself it would hold the loop, and the ticker could never release it."""
    send = register(app)
    release = threading.Event()
    held: list[str] = []

    def slow_statement(op: str) -> None:
        held.append(op)
        if not release.wait(10):
            raise AssertionError(f"{op}: the event loop did not run while the database call was out")

    async def ticker() -> int:
        ticks = 0
        while ticks < 3:
            await asyncio.sleep(0)
            if held:
                ticks += 1
        release.set()
        return ticks

    async def main() -> tuple[str, list[Enqueued], int]:
        one = send.enqueue_async(Email(to="a"), idempotency_key="ka")
        ticks = asyncio.create_task(ticker())
        job_id = await one
        release.clear()
        held.clear()
        ticks2 = asyncio.create_task(ticker())
        many = await send.enqueue_many_async([Email(to=str(n)) for n in range(50)])
        return job_id, many, (await ticks) + (await ticks2)

    app.storage.fault_injector = slow_statement
    job_id, many, ticks = asyncio.run(main())
    app.storage.fault_injector = None
    assert ticks == 6
    assert app.storage.get_job(job_id) is not None
    assert len(many) == 50 and stored(app) == 51


def test_the_sync_enqueue_would_block_the_loop_so_the_async_test_can_fail(app: ChokaQ) -> None:
    send = register(app)
    release = threading.Event()
    timed_out: list[bool] = []

    def slow_statement(op: str) -> None:
        timed_out.append(not release.wait(0.5))

    async def main() -> None:
        async def ticker() -> None:
            await asyncio.sleep(0)
            release.set()

        task = asyncio.create_task(ticker())
        send.enqueue(Email(to="blocking"))  # on the loop: the ticker cannot run until it returns
        await task

    app.storage.fault_injector = slow_statement
    asyncio.run(main())
    app.storage.fault_injector = None
    assert timed_out and timed_out[0]


def test_concurrent_batches_sharing_keys_store_each_key_once(app: ChokaQ) -> None:
    """Two producers send batches with overlapping keys at once: the INSERT that meets the other's
    key rolls its batch back and plans it again, so each key is stored once, both calls answer
    its one id, and exactly one of them says it created it."""
    send = register(app)
    send.enqueue(Email(to="warm"))  # the queue row
    start = threading.Barrier(2)
    results: dict[int, list[Enqueued]] = {}

    def produce(offset: int) -> None:
        reqs = [send.prepare(Email(to=str(n)), idempotency_key=f"k{n}") for n in range(offset, offset + 300)]
        start.wait()
        results[offset] = app.enqueue_many(reqs)

    threads = [threading.Thread(target=produce, args=(offset,)) for offset in (0, 150)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids: dict[int, set[str]] = {}
    created: dict[int, int] = {}
    for offset, out in results.items():
        assert len(out) == 300
        for n, e in enumerate(out, offset):
            ids.setdefault(n, set()).add(e.id)
            created[n] = created.get(n, 0) + e.created
    assert all(len(v) == 1 for v in ids.values()) and all(c == 1 for c in created.values())
    assert stored(app) == 451
