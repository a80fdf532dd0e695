"""Storage calls whose reply is lost after the server ran them (the fault proxy's mode 1), one
request of the transaction at a time, COMMIT included."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select, text

from chokaq.domain.models import EnqueueRequest, Lease
from chokaq.domain.states import FailureReason, JobStatus
from chokaq.settings import StorageSettings
from chokaq.storage import Storage
from chokaq.storage.schema import jobs_archive, jobs_hot
from chokaq.storage.store import Completion
from tests.faultproxy import FaultProxy
from tests.helpers import wait_for

Proxy = Callable[[str], FaultProxy]
# Requests in an enqueue with a key: BEGIN, the key lookup, SAVEPOINT, INSERT (its NOTIFY rides
# in its RETURNING), RELEASE, COMMIT (psycopg sends each as one request); a few more so every one
# of them is hit.
REQUESTS = 9


def stored(direct: Storage, **where: str) -> int:
    col = next(iter(where))
    return int(
        direct.read(
            lambda c: c.execute(
                select(func.count()).select_from(jobs_hot).where(jobs_hot.c[col] == where[col])
            ).scalar_one()
        )
    )


def through(proxy: FaultProxy, pg_url: str) -> Storage:
    """A Storage whose connections go through the proxy, connected already: the dialect's own
    first queries are not the ones whose replies a test swallows."""
    s = Storage(proxy.url(pg_url), settings=StorageSettings(transient_retries=5, listen_notify=False))
    s.ping()
    return s


@pytest.fixture
def direct(pg_url: str) -> Storage:
    s = Storage(pg_url)
    s.upgrade()
    return s


def test_enqueue_with_an_idempotency_key_is_stored_exactly_once_under_lost_replies(
    pg_url: str, direct: Storage, fault_proxy: Proxy
) -> None:
    proxy = fault_proxy(pg_url)
    s = through(proxy, pg_url)
    s.enqueue(EnqueueRequest(type="warm", idempotency_key="warm"))  # the queue row exists now
    swallowed = 0
    for n in range(REQUESTS):
        key = f"key-{n}"
        done = proxy.arm_swallow(after=n)
        job_id, created = s.enqueue(EnqueueRequest(type="t", idempotency_key=key, tags=key))
        swallowed += proxy.wait_swallowed(done, 0.5)
        proxy.disarm()
        assert stored(direct, IdempotencyKey=key) == 1, key
        # A new key: created, even when the replay met the job its own lost COMMIT stored.
        assert created, key
        record = direct.get_job(job_id)
        assert record is not None and record.idempotency_key == key
    assert swallowed >= 6  # every request of the transaction, COMMIT among them, lost its reply once
    s.close()


def test_enqueue_without_a_key_is_stored_once_per_call(pg_url: str, direct: Storage, fault_proxy: Proxy) -> None:
    """The call makes up the job id, so a replay after a lost COMMIT reply meets its own row and
    returns it: one call, one job. (Only a caller that retries a call that raised can store a job
    twice: at-least-once, see docs/reliability.md.)"""
    proxy = fault_proxy(pg_url)
    s = through(proxy, pg_url)
    s.enqueue(EnqueueRequest(type="warm"))
    swallowed = 0
    for n in range(REQUESTS):
        # A queue this Storage has not met: its row and the job in one transaction (BEGIN, the
        # queue lookup, SAVEPOINT, the queue's INSERT, RELEASE, the job's INSERT, COMMIT).
        tag = f"tag-{n}"
        done = proxy.arm_swallow(after=n)
        job_id, created = s.enqueue(EnqueueRequest(type="t", queue=f"new-{n}", tags=tag))
        swallowed += proxy.wait_swallowed(done, 0.5)
        proxy.disarm()
        assert created and stored(direct, Tags=tag) == 1, tag
        assert direct.get_job(job_id) is not None
    assert swallowed >= 7
    for n in range(3):
        # A known queue: the job's INSERT alone, one request, whose reply is lost every time.
        tag = f"one-{n}"
        done = proxy.arm_swallow(after=0)
        job_id, created = s.enqueue(EnqueueRequest(type="t", tags=tag))
        assert proxy.wait_swallowed(done, 0.5), tag
        proxy.disarm()
        assert created and stored(direct, Tags=tag) == 1, tag
        assert direct.get_job(job_id) is not None
    done = proxy.arm_swallow(after=2)  # BEGIN, INSERT, then COMMIT's reply is lost
    ids = s.enqueue_many([EnqueueRequest(type="t", tags="many") for _ in range(5)])
    swallowed += proxy.wait_swallowed(done, 0.5)
    proxy.disarm()
    assert stored(direct, Tags="many") == 5 and all(direct.get_job(i) for i in ids)
    # Mixed: a keyed job reports the id stored under its key.
    reqs = [EnqueueRequest(type="t", tags="mixed"), EnqueueRequest(type="t", tags="mixed", idempotency_key="mk")]
    for n in range(REQUESTS):
        done = proxy.arm_swallow(after=n)
        ids = s.enqueue_many(reqs)
        swallowed += proxy.wait_swallowed(done, 0.5)
        proxy.disarm()
        keyed = direct.get_job(ids[1])
        assert keyed is not None and keyed.idempotency_key == "mk"
        assert direct.get_job(ids[0]) is not None
    assert stored(direct, IdempotencyKey="mk") == 1 and stored(direct, Tags="mixed") == 1 + REQUESTS
    assert swallowed >= 7 + 1 + 5
    s.close()


def _finish_it_before_the_replay(storage: Storage, direct: Storage, op: str) -> list[int]:
    """Before the second attempt of ``op``, a worker claims and archives whatever is Pending: the
    job that a lost COMMIT reply stored runs and leaves JobsHot while the caller backs off."""
    calls = [0]

    def hook(name: str) -> None:
        if name != op:
            return
        calls[0] += 1
        if calls[0] == 2:
            jobs = direct.fetch("fast", 100, start=True)
            direct.complete("fast", [Completion(j.lease, 1) for j in jobs])

    storage.fault_injector = hook
    return calls


def total(direct: Storage, tag: str) -> int:
    def count(c: Any) -> int:
        return sum(
            int(c.execute(select(func.count()).select_from(t).where(t.c.Tags == tag)).scalar_one())
            for t in (jobs_hot, jobs_archive)
        )

    return direct.read(count)


@pytest.mark.parametrize("many", [False, True], ids=["enqueue", "enqueue_many"])
def test_a_replayed_enqueue_does_not_store_again_a_job_that_already_ran(
    pg_url: str, direct: Storage, fault_proxy: Proxy, many: bool
) -> None:
    """The replay asks all three tables whether its first attempt committed: the job may have been
    claimed and archived in between, and inserting it again would run it twice."""
    proxy = fault_proxy(pg_url)
    s = through(proxy, pg_url)
    s.enqueue(EnqueueRequest(type="warm", queue="fast"))
    direct.complete("fast", [Completion(j.lease, 1) for j in direct.fetch("fast", 10, start=True)])
    replays = 0
    for n in range(REQUESTS):
        tag = f"ran-{n}-{many}"
        calls = _finish_it_before_the_replay(s, direct, "enqueue_many" if many else "enqueue")
        # A single enqueue to a known queue is one request (its INSERT): on even rounds its reply is
        # lost. On odd rounds the queue is new: its row and the job go in one transaction, and the
        # reply to its n-th request is lost.
        one = not many and n % 2 == 0
        done = proxy.arm_swallow(after=0 if one else n)
        req = EnqueueRequest(type="t", queue="fast" if many or one else f"fast-{n}", tags=tag)
        job_id = s.enqueue_many([req])[0] if many else s.enqueue(req)[0]
        proxy.wait_swallowed(done, 0.5)
        proxy.disarm()
        s.fault_injector = None
        replays += calls[0] > 1
        assert total(direct, tag) == 1, (n, tag)
        assert direct.get_job(job_id) is not None
    assert replays >= 3
    s.close()


LATE = 4242  # the advisory lock that holds the lost attempt's COMMIT back (see hold_commits_back)


def hold_commits_back(direct: Storage, tag: str) -> None:
    """A deferred trigger: the COMMIT of a transaction that stored a job tagged ``tag`` waits for
    advisory lock LATE, so a lost attempt's COMMIT can be running on the server after its client
    has given up on it."""
    ddl = [
        f"""CREATE FUNCTION chokaq.hold_back() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF NEW."Tags" = '{tag}' THEN PERFORM pg_advisory_xact_lock({LATE}); END IF; RETURN NULL; END $$""",
        'CREATE CONSTRAINT TRIGGER hold_back AFTER INSERT ON chokaq."JobsHot" DEFERRABLE INITIALLY DEFERRED '
        "FOR EACH ROW EXECUTE FUNCTION chokaq.hold_back()",
    ]
    direct.write(lambda c: [c.execute(text(d)) for d in ddl])


def waiting(direct: Storage) -> int:
    """Lock requests in this database that wait."""
    sql = (
        "SELECT count(*) FROM pg_locks WHERE NOT granted "
        "AND (database IS NULL OR database = (SELECT oid FROM pg_database WHERE datname = current_database()))"
    )
    return int(direct.read(lambda c: c.execute(text(sql)).scalar_one()))


@pytest.mark.parametrize("many", [False, True], ids=["enqueue", "enqueue_many"])
def test_a_replay_that_meets_its_own_late_commit_reports_the_jobs_stored(
    pg_url: str, direct: Storage, fault_proxy: Proxy, many: bool
) -> None:
    """The lost attempt's COMMIT can still be running on the server when the replay asks whether
    it committed, and succeed afterwards: the replay's INSERT then meets the jobs' own rows. That
    is the jobs stored once, not an error that a caller would retry into a second copy."""
    proxy = fault_proxy(pg_url)
    s = through(proxy, pg_url)
    s.enqueue(EnqueueRequest(type="warm"))  # the default queue's row: its single jobs are one INSERT
    hold_commits_back(direct, "late")
    reqs = [EnqueueRequest(type="t", tags="late") for _ in range(3 if many else 1)]
    outcome: list[Any] = []

    def call() -> None:
        try:
            outcome.append(s.enqueue_many(reqs) if many else [s.enqueue(reqs[0])[0]])
        except Exception as exc:  # the assertion below shows it
            outcome.append(exc)

    with direct.engine.connect() as holder:
        holder.execute(text("SELECT pg_advisory_lock(:lock)"), {"lock": LATE})
        caller = threading.Thread(target=call)
        try:
            caller.start()
            wait_for(lambda: waiting(direct) == 1)  # the first attempt's COMMIT waits
            proxy.cut_all()  # its connection is gone; its COMMIT is not
            # The replay found nothing stored, and its INSERT waits for the first attempt's rows.
            wait_for(lambda: waiting(direct) == 2)
        finally:
            holder.execute(text("SELECT pg_advisory_unlock_all()"))
            caller.join(30)
    assert not caller.is_alive()
    assert len(outcome) == 1 and not isinstance(outcome[0], Exception), outcome
    assert stored(direct, Tags="late") == len(reqs)
    assert all(direct.get_job(job_id) is not None for job_id in outcome[0])
    s.close()


def test_a_complete_whose_reply_is_lost_is_a_success_not_a_conflict(
    pg_url: str, direct: Storage, fault_proxy: Proxy
) -> None:
    proxy = fault_proxy(pg_url)
    s = through(proxy, pg_url)
    ids = direct.enqueue_many([EnqueueRequest(type="t") for _ in range(3)])
    jobs = direct.fetch("w1", 3, start=True)
    assert {j.id for j in jobs} == set(ids)
    done = proxy.arm_swallow()
    archived = s.complete("w1", [Completion(j.lease, 5) for j in jobs])
    assert proxy.wait_swallowed(done, 1.0)
    assert archived == set(ids)
    n = direct.read(lambda c: c.execute(select(func.count()).select_from(jobs_archive)).scalar_one())
    assert n == 3
    s.close()


def test_a_start_whose_reply_is_lost_hands_over_the_jobs_it_started(
    pg_url: str, direct: Storage, fault_proxy: Proxy
) -> None:
    proxy = fault_proxy(pg_url)
    s = through(proxy, pg_url)
    direct.enqueue_many([EnqueueRequest(type="t") for _ in range(2)])
    jobs = direct.fetch("w1", 2)
    done = proxy.arm_swallow()
    result = s.start("w1", jobs)
    assert proxy.wait_swallowed(done, 1.0)
    assert sorted(j.id for j in result.started) == sorted(j.id for j in jobs)
    assert result.lost == [] and result.released == []
    assert all(j.attempt_count == 1 for j in result.started)  # counted once, by the lost commit
    s.close()


def test_recognising_an_earlier_success_keeps_the_fence_strict(direct: Storage) -> None:
    """Archive under w1 is w1's success only: another worker, or w1 at another attempt, conflicts."""
    direct.enqueue_many([EnqueueRequest(type="t") for _ in range(2)])
    first, second = direct.fetch("w1", 2, start=True)
    assert direct.complete("w1", [Completion(first.lease, 1)]) == {first.id}
    assert direct.complete("w1", [Completion(first.lease, 1)]) == {first.id}  # a replay: still ours
    assert direct.complete("w2", [Completion(Lease(first.id, "w2", first.attempt_count), 1)]) == set()
    assert direct.complete("w1", [Completion(Lease(first.id, "w1", first.attempt_count + 1), 1)]) == set()
    # A zombie burial is not taken for our own failure.
    assert direct.fail(second.lease, FailureReason.FATAL_ERROR, "boom") is True
    assert direct.fail(second.lease, FailureReason.FATAL_ERROR, "boom") is True  # replay
    assert direct.fail(second.lease, FailureReason.TIMEOUT, "other") is False
    assert direct.fail(Lease(second.id, "w2", second.attempt_count), FailureReason.FATAL_ERROR, "boom") is False


def test_a_job_the_sweep_retried_is_not_taken_for_our_own_retry(direct: Storage) -> None:
    """The sweep's zombie retry leaves the job as a worker's retry would (Pending, no owner, same
    attempt); without a lost reply behind it, a late retry by the worker that lost it conflicts."""
    direct.enqueue(EnqueueRequest(type="safe"))
    (job,) = direct.fetch("w1", 1, start=True, zombie_retry_types={"safe"})
    swept = direct.sweep(fetched_timeout=60, zombie_timeout=-1, max_attempts=5)  # every heartbeat expired
    assert swept.retried_zombies == 1
    assert direct.retry(job.lease, 30) is False
    assert direct.reschedule("w1", [job.lease]) == []


def test_a_retry_whose_reply_was_lost_is_recognised_in_a_later_call(
    pg_url: str, direct: Storage, fault_proxy: Proxy
) -> None:
    """A retry that raised after its COMMIT may have landed: the worker calls again later, and
    that call counts the job where its first try put it as done, not as a conflict."""
    proxy = fault_proxy(pg_url)
    s = Storage(proxy.url(pg_url), settings=StorageSettings(transient_retries=0, listen_notify=False))
    s.ping()
    recognised = 0
    for n in range(REQUESTS):
        direct.enqueue(EnqueueRequest(type="t", tags=f"r{n}"))
        (job,) = direct.fetch("w1", 1, start=True)
        done = proxy.arm_swallow(after=n)
        try:
            first: bool | None = s.retry(job.lease, 30)
        except Exception:
            first = None  # no replays: the lost reply surfaced as an error
        swallowed = proxy.wait_swallowed(done, 0.5)
        proxy.disarm()
        if not swallowed:
            assert first is True
            continue
        row = direct.get_job(job.id)
        assert row is not None
        if row.status == JobStatus.PENDING:  # the first try committed, unheard
            assert s.retry(job.lease, 30) is True, n
            recognised += 1
        else:  # it did not: the job is still ours and Processing, and a new try moves it
            assert s.retry(job.lease, 30) is True, n
        direct.write(lambda c, i=job.id: c.execute(jobs_hot.delete().where(jobs_hot.c.Id == i)))
    assert recognised >= 1
    s.close()


def test_a_schedule_run_now_whose_reply_is_lost_stores_one_job_and_one_audit_row(
    pg_url: str, direct: Storage, fault_proxy: Proxy
) -> None:
    """Run now has no slot to re-check: the request's own idempotency key makes a replay after a
    lost reply find the job the lost attempt stored, and skip the second audit row."""
    from chokaq import ChokaQ
    from chokaq.storage import Actor, ScheduleStore
    from chokaq.storage.schema import audit_log

    proxy = fault_proxy(pg_url)
    app = ChokaQ(storage_url=proxy.url(pg_url), storage={"transient_retries": 5, "listen_notify": False})

    @app.job("report_v1")
    def report(payload: dict[str, object]) -> None:
        pass

    app.schedule("nightly", "0 3 * * *", job="report_v1")
    app.sync_schedules()
    store = ScheduleStore(app.storage)
    ids = []
    for n in range(REQUESTS):
        done = proxy.arm_swallow(after=n)
        ids.append(store.run_now("nightly", Actor("ops", "operator")))
        proxy.wait_swallowed(done, 0.5)
        proxy.disarm()

    def counts(c: Any) -> tuple[int, int]:
        jobs = c.execute(
            select(func.count()).select_from(jobs_hot).where(jobs_hot.c.Tags == "schedule:nightly@run-now")
        ).scalar_one()
        audits = c.execute(
            select(func.count()).select_from(audit_log).where(audit_log.c.Action == "schedule.run")
        ).scalar_one()
        return int(jobs), int(audits)

    assert direct.read(counts) == (REQUESTS, REQUESTS)
    assert len(set(ids)) == REQUESTS and all(direct.get_job(i) is not None for i in ids)
    app.close()
