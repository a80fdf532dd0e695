"""Schedules on real databases (SQLite files and PostgreSQL): upsert from code, firing once per
slot under racing threads, the missed-slot policies after downtime, operator actions audited."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, inspect, select, text, update

from chokaq import ChokaQ
from chokaq.domain.errors import NotFoundError
from chokaq.domain.schedules import ScheduleError
from chokaq.operations.service import Operations
from chokaq.storage import Actor, EventFeed, ScheduleStore, Storage
from chokaq.storage.schema import audit_log, jobs_archive, jobs_dlq, jobs_hot, schedules
from tests.conftest import metric_total, otel_memory
from tests.helpers import wait_for

OPS = Actor("ops@example.com", "operator")


def make_app(db_url: str, **settings: object) -> ChokaQ:
    app = ChokaQ(storage_url=db_url, **settings)

    @app.job("tick_v1", queue="ticks")
    def tick(payload: dict[str, object]) -> None: ...

    return app


@pytest.fixture
def app(db_url: str) -> Iterator[ChokaQ]:
    a = make_app(db_url)
    a.storage.upgrade()
    try:
        yield a
    finally:
        a.close()


def jobs(storage: Storage) -> list[tuple[str, str | None]]:
    """(IdempotencyKey, CreatedBy) of every job in the three tables."""

    def work(c):  # type: ignore[no-untyped-def]
        rows = c.execute(select(jobs_hot.c.IdempotencyKey, jobs_hot.c.CreatedBy)).all()
        rows += c.execute(select(jobs_archive.c.Id, jobs_archive.c.CreatedBy)).all()
        return [tuple(r) for r in rows]

    return storage.read(work)  # type: ignore[no-any-return]


def set_due(storage: Storage, name: str, minutes_back: int = 0) -> datetime:
    """Pretend the minutely schedule's next slot came ``minutes_back`` slots before the current
    minute's (no sleeping): NextDueUtc moved back to that slot."""

    def work(c):  # type: ignore[no-untyped-def]
        now = storage.db_now(c)
        due = now.replace(second=0, microsecond=0) - timedelta(minutes=minutes_back)
        c.execute(update(schedules).where(schedules.c.Name == name).values(NextDueUtc=due))
        return due

    return storage.write(work)  # type: ignore[no-any-return]


def test_migration_5_creates_the_table(db_url: str) -> None:
    s = Storage(db_url)
    s.upgrade()
    schema = None if s.dialect == "sqlite" else "chokaq"
    q = (lambda t: f'"{t}"') if s.dialect == "sqlite" else (lambda t: f'chokaq."{t}"')
    with s.engine.begin() as c:  # a database as version 4 left it
        c.execute(text(f"DROP TABLE {q('Schedules')}"))
        c.execute(text(f'DELETE FROM {q("SchemaMigrations")} WHERE "Version" = 5'))
    assert not inspect(s.engine).has_table("Schedules", schema=schema)
    assert s.upgrade() == [5]
    assert "IX_Schedules_NextDue" in {i["name"] for i in inspect(s.engine).get_indexes("Schedules", schema=schema)}
    assert s.upgrade() == []
    s.close()


def test_sync_upserts_and_orphans(app: ChokaQ) -> None:
    app.schedule("a", "0 3 * * *", job="tick_v1", tz="Europe/Oslo")
    app.schedule("b", "*/5 * * * *", job="tick_v1", payload={"n": 1})
    assert app.sync_schedules() == {"created": ["a", "b"], "updated": [], "orphaned": []}
    assert app.sync_schedules() == {"created": [], "updated": [], "orphaned": []}
    store = ScheduleStore(app.storage)
    b = store.get("b")
    assert (b.queue, b.payload, b.cron, b.time_zone, b.is_orphaned) == ("ticks", '{"n":1}', "*/5 * * * *", "UTC", False)
    assert b.next_due_utc.minute % 5 == 0 and b.next_due_utc.second == 0

    # The code changes: a's cron moves, b leaves the code.
    later = make_app(app.settings.storage_url)
    later.schedule("a", "0 4 * * *", job="tick_v1", tz="Europe/Oslo")
    assert later.sync_schedules() == {"created": [], "updated": ["a"], "orphaned": ["b"]}
    assert store.get("a").cron == "0 4 * * *"
    assert store.get("b").is_orphaned
    set_due(app.storage, "b", 1)
    assert app.fire_schedules() == []  # orphaned rows fire no more
    # An app with no handlers (`chokaq sweep` without --app) changes nothing.
    assert ChokaQ(storage_url=app.settings.storage_url).sync_schedules() == {}
    later.close()


def test_a_bad_schedule_stores_nothing(app: ChokaQ) -> None:
    app.schedule("good", "0 3 * * *", job="tick_v1")
    app.schedule("ghost", "0 3 * * *", job="nope_v1")
    with pytest.raises(ScheduleError, match="schedule 'ghost'"):
        app.sync_schedules()
    assert ScheduleStore(app.storage).list() == []


def test_fires_each_slot_once_with_its_key(app: ChokaQ) -> None:
    otel_memory()
    before = metric_total("chokaq.schedules.fired", schedule="minutely")
    lags = metric_total("chokaq.schedules.lag", schedule="minutely")  # a histogram: its count
    app.schedule("minutely", "* * * * *", job="tick_v1", payload={"n": 2})
    app.sync_schedules()
    assert app.fire_schedules() == []  # not due yet
    due = set_due(app.storage, "minutely")
    (fired,) = app.fire_schedules()
    assert fired.slots == [due] and len(fired.job_ids) == 1 and 0 <= fired.lag < 60
    assert app.fire_schedules() == []
    key = f"schedule:minutely@{due:%Y-%m-%dT%H:%M:%S}Z"
    assert jobs(app.storage) == [(key, "schedule:minutely")]
    job = app.storage.get_job(fired.job_ids[0])
    assert job is not None and (job.queue, job.type, job.payload) == ("ticks", "tick_v1", '{"n":2}')
    info = ScheduleStore(app.storage).get("minutely")
    assert (info.last_slot_utc, info.last_job_id) == (due, fired.job_ids[0])
    assert info.next_due_utc == due + timedelta(minutes=1)
    assert metric_total("chokaq.schedules.fired", schedule="minutely") == before + 1
    assert metric_total("chokaq.schedules.lag", schedule="minutely") == lags + 1


def test_racing_threads_fire_each_slot_once(app: ChokaQ) -> None:
    app.schedule("minutely", "* * * * *", job="tick_v1", missed="all", missed_max=5)
    app.sync_schedules()
    set_due(app.storage, "minutely", 4)  # five slots due
    apps = [make_app(app.settings.storage_url) for _ in range(6)]
    barrier = threading.Barrier(len(apps))
    fired: list[int] = []
    errors: list[BaseException] = []

    def go(a: ChokaQ) -> None:
        try:
            barrier.wait()
            fired.extend(len(f.job_ids) for f in a.fire_schedules())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(a,)) for a in apps]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for a in apps:
        a.close()
    assert not errors, errors
    assert fired == [5]  # one process fired, the others found the row held or no longer due
    keys = Counter(k for k, _ in jobs(app.storage))
    assert len(keys) == 5 and set(keys.values()) == {1}


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("latest", 1), ("skip", 0), ("all", 5)],
)
def test_downtime_of_five_slots(app: ChokaQ, policy: str, expected: int) -> None:
    app.schedule("minutely", "* * * * *", job="tick_v1", missed=policy)  # type: ignore[arg-type]
    app.sync_schedules()
    # Everything was down for five slots, all of them past Schedules.MissedGrace (0 s here).
    app.settings.schedules.missed_grace = 0
    due = set_due(app.storage, "minutely", 4)
    fired = app.fire_schedules()
    slots = [s for f in fired for s in f.slots]
    assert len(slots) == expected
    if policy == "latest":
        assert slots == [due + timedelta(minutes=4)]
    if policy == "all":
        assert slots == [due + timedelta(minutes=i) for i in range(5)]
    info = ScheduleStore(app.storage).get("minutely")
    assert info.next_due_utc == due + timedelta(minutes=5)
    assert len(jobs(app.storage)) == expected
    assert sum(f.dropped for f in fired) == 5 - expected
    assert app.fire_schedules() == []


def test_a_crash_inside_the_firing_transaction_loses_no_slot(app: ChokaQ) -> None:
    app.schedule("minutely", "* * * * *", job="tick_v1")
    app.sync_schedules()
    due = set_due(app.storage, "minutely")
    store = ScheduleStore(app.storage)
    real = store._enqueue

    def boom(*args: object, **kw: object) -> str:
        real(*args, **kw)  # type: ignore[arg-type]
        raise RuntimeError("process died after the INSERT, before the row moved")

    store._enqueue = boom  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        store.fire("minutely", grace=60)
    assert jobs(app.storage) == []  # rolled back with the row
    assert store.get("minutely").next_due_utc == due
    (fired,) = app.fire_schedules()
    assert fired.slots == [due] and len(jobs(app.storage)) == 1


def test_operator_actions_are_audited(app: ChokaQ) -> None:
    app.schedule("minutely", "* * * * *", job="tick_v1")
    app.sync_schedules()
    ops = Operations(app)
    paused = ops.pause_schedule(OPS, "minutely", True)
    assert paused.is_paused
    set_due(app.storage, "minutely", 2)
    assert app.fire_schedules() == []  # paused
    resumed = ops.pause_schedule(OPS, "minutely", False)
    # Resumed from the next slot after now: the slots while paused were not wanted.
    assert not resumed.is_paused and resumed.next_due_utc > app.storage.ping().replace(tzinfo=None)
    before = ScheduleStore(app.storage).get("minutely")
    job_id = ops.run_schedule(OPS, "minutely")
    after = ScheduleStore(app.storage).get("minutely")
    assert after.next_due_utc == before.next_due_utc and after.last_job_id == job_id
    job = app.storage.get_job(job_id)
    assert job is not None and job.created_by == OPS.name
    # A key of the request's own (a replay after a lost reply finds this job), never a slot's.
    assert (job.idempotency_key or "").startswith("schedule:minutely@run-now:")
    edited = ops.edit_schedule(Actor("root", "admin"), "minutely", cron="0 5 * * *", tz="Europe/Oslo")
    assert (edited.cron, edited.time_zone) == ("0 5 * * *", "Europe/Oslo")

    def audit(c):  # type: ignore[no-untyped-def]
        return c.execute(select(audit_log.c.Action, audit_log.c.Actor).order_by(audit_log.c.Id)).all()

    assert [tuple(r) for r in app.storage.read(audit)] == [
        ("schedule.pause", OPS.name),
        ("schedule.resume", OPS.name),
        ("schedule.run", OPS.name),
        ("schedule.edit", "root"),
    ]
    # Each also reaches every process's Deck through the event feed, in the same transaction.
    told = [(r.data["action"], r.data["actor"]) for r in EventFeed(app.storage).latest(50) if r.kind == "audit"]
    assert sorted(told) == sorted(
        [
            ("schedule.pause", OPS.name),
            ("schedule.resume", OPS.name),
            ("schedule.run", OPS.name),
            ("schedule.edit", "root"),
        ]
    )
    with pytest.raises(NotFoundError):
        ops.pause_schedule(OPS, "nope", True)
    with pytest.raises(ValueError, match="invalid cron expression"):
        ops.edit_schedule(Actor("root", "admin"), "minutely", cron="99 * * * *", tz=None)
    assert ScheduleStore(app.storage).get("minutely").cron == "0 5 * * *"

    def dlq_count(c):  # type: ignore[no-untyped-def]
        return c.execute(select(func.count()).select_from(jobs_dlq)).scalar_one()

    assert app.storage.read(dlq_count) == 0


def test_a_worker_fires_and_runs_scheduled_jobs(db_url: str) -> None:
    app = make_app(db_url, schedules={"poll_interval": 0.1})
    ran: list[str] = []

    @app.job("every_second_v1", schedule="* * * * * *")
    def every(payload: dict[str, object]) -> None:
        ran.append("x")

    app.storage.upgrade()
    worker = app.worker(concurrency=2)
    t = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    t.start()
    try:
        wait_for(lambda: len(ran) >= 3, timeout=30)
    finally:
        worker.stop()
        t.join(30)
    info = ScheduleStore(app.storage).get("every_second_v1")
    assert info.last_job_id is not None
    app.close()


def test_a_worker_on_a_database_without_the_table_still_runs_jobs(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(db_url, schedules={"poll_interval": 0.1})
    app.schedule("minutely", "* * * * *", job="tick_v1")
    app.storage.upgrade()
    q = '"Schedules"' if app.storage.dialect == "sqlite" else 'chokaq."Schedules"'
    with app.storage.engine.begin() as c:  # a database not yet upgraded (a rolling deploy)
        c.execute(text(f"DROP TABLE {q}"))
    job_id = app.enqueue("tick_v1", {})
    worker = app.worker(concurrency=1)
    t = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    with caplog.at_level("INFO"):
        t.start()
        try:
            wait_for(lambda: (j := app.storage.get_job(job_id)) is not None and j.location.value == "archive")
            wait_for(lambda: "schedules: firing failed" in caplog.text)
        finally:
            worker.stop()
            t.join(30)
    assert "the code's schedules were not stored" in caplog.text and "chokaq db upgrade" in caplog.text
    assert caplog.text.count("schedules: firing failed") == 1  # once while it repeats, not every poll
    app.close()


def test_a_schedule_this_process_cannot_fire_does_not_hold_up_the_others(
    app: ChokaQ, caplog: pytest.LogCaptureFixture
) -> None:
    app.schedule("a-broken", "* * * * *", job="tick_v1")
    app.schedule("b-fine", "* * * * *", job="tick_v1")
    app.sync_schedules()
    set_due(app.storage, "a-broken")
    set_due(app.storage, "b-fine")
    # A zone this host's tzdata does not know (written by a newer host during a rolling deploy).
    app.storage.write(
        lambda c: c.execute(update(schedules).where(schedules.c.Name == "a-broken").values(TimeZone="Mars/Olympus"))
    )
    with caplog.at_level("ERROR", logger="chokaq.schedules"):
        fired = app.fire_schedules()
        assert app.fire_schedules() == []  # and again: logged once
    assert [f.name for f in fired] == ["b-fine"]
    assert [r.getMessage() for r in caplog.records].count(
        next(r.getMessage() for r in caplog.records if "a-broken" in r.getMessage())
    ) == 1
    assert ScheduleStore(app.storage).get("a-broken").next_due_utc <= datetime.now()  # not moved
