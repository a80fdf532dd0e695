"""Worker presence (docs/workers.md) on real databases: a worker's row at start, on its ticks and at
a clean exit; the sweep's lost marking and bounded prune; a tick costs at most one statement."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, event, inspect, update
from sqlalchemy.schema import DropIndex, DropTable

from chokaq import JobContext, __version__
from chokaq.domain.models import EnqueueRequest
from chokaq.domain.workers import WorkerIdentity
from chokaq.storage import Storage, WorkerDirectory, WorkerPresence
from chokaq.storage.schema import jobs_hot, schema_migrations, workers, zombie_worker_index
from tests.helpers import wait_for
from tests.integration.test_worker import make_app


def _identity(worker_id: str, queues: tuple[str, ...] | None = None) -> WorkerIdentity:
    return WorkerIdentity(worker_id, "host-a", 4242, "9.9.9", queues, 8)


def _age(storage: Storage, worker_id: str, seconds: float, *, stopped: bool = False) -> None:
    """Move a row's clock back (what a long silence, or a long-ago stop, leaves), on the database's clock."""
    db_now = storage.ping()
    values: dict[str, Any] = {"LastSeenUtc": db_now - timedelta(seconds=seconds)}
    if stopped:
        values["StoppedAtUtc"] = db_now - timedelta(seconds=seconds)
    storage.write(lambda c: c.execute(update(workers).where(workers.c.WorkerId == worker_id).values(**values)))


def _holding_app(db_url: str) -> tuple[Any, threading.Event]:
    """An app whose ``hold_v1`` jobs run until the event is set."""
    app = make_app(db_url)
    release = threading.Event()

    @app.job("hold_v1")
    async def hold(payload: dict[str, Any], ctx: JobContext) -> None:
        while not release.is_set():
            await asyncio.sleep(0.01)

    return app, release


def test_a_worker_is_live_while_it_runs_and_stopped_after_a_clean_exit(db_url: str) -> None:
    app, release = _holding_app(db_url)
    job_id = app.enqueue("hold_v1", {}, queue="reports")
    worker = app.worker(queues=["reports", "mail"], concurrency=3, worker_id="ракета-1")
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    directory = WorkerDirectory(app.storage)
    try:
        # A tick after the job started reports it running; the list counts the job it holds.
        live = wait_for(lambda: next((w for w in directory.list() if w.running == 1 and w.holding == 1), None))
        assert live.worker_id == "ракета-1" and live.state == "live"
        assert (live.host, live.pid, live.version) == (socket.gethostname(), os.getpid(), __version__)
        assert live.queues == ["reports", "mail"] and live.concurrency == 3 and live.stopped_at_utc is None
        detail = directory.get("ракета-1")
        assert detail is not None and [j.id for j in detail.held_jobs] == [job_id]
        assert detail.held_jobs[0].status == "Processing" and detail.held_jobs[0].queue == "reports"
        started = live.started_at_utc
    finally:
        release.set()
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()
    (stopped,) = directory.list()
    assert stopped.state == "stopped" and stopped.running == 0 and stopped.holding == 0
    assert stopped.stopped_at_utc is not None and stopped.started_at_utc == started
    assert directory.list(state="live") == [] and [w.worker_id for w in directory.list(state="stopped")] == ["ракета-1"]


def test_the_sweep_marks_a_silent_worker_lost_and_prunes_old_rows_in_batches(storage: Storage) -> None:
    directory = WorkerDirectory(storage)
    for name in ("quiet", "chatty", *(f"old-{i}" for i in range(5)), "recent-stop"):
        WorkerPresence(storage, _identity(name)).record(0, starting=True)
    for i in range(5):
        WorkerPresence(storage, _identity(f"old-{i}")).stopped()
        _age(storage, f"old-{i}", 8 * 86400, stopped=True)
    WorkerPresence(storage, _identity("recent-stop")).stopped()
    _age(storage, "quiet", 120)  # silent for two minutes

    lost, pruned = directory.sweep(silent_for=60, retention=7 * 86400, batch_size=2)
    assert (lost, pruned) == (1, 5)  # three batches of at most two
    states = {w.worker_id: w.state for w in directory.list()}
    assert states == {"quiet": "lost", "chatty": "live", "recent-stop": "stopped"}
    # Found lost now: kept for the retention from now, although last seen two minutes ago.
    assert directory.sweep(silent_for=60, retention=60, batch_size=2) == (0, 0)

    # A lost worker that comes back marks itself live at its next tick.
    WorkerPresence(storage, _identity("quiet")).record(2)
    back = directory.get("quiet")
    assert back is not None and back.state == "live" and back.running == 2 and back.stopped_at_utc is None


def test_a_stale_exit_does_not_stop_a_successor_under_the_same_id(storage: Storage) -> None:
    WorkerPresence(storage, _identity("fixed-name")).record(0, starting=True)
    successor = WorkerIdentity("fixed-name", "host-b", 7, "9.9.9", None, 1)
    WorkerPresence(storage, successor).record(0, starting=True)  # the same id, another process
    WorkerPresence(storage, _identity("fixed-name")).stopped()  # the first process's exit, late
    row = WorkerDirectory(storage).get("fixed-name")
    assert row is not None and row.state == "live" and (row.host, row.pid, row.queues) == ("host-b", 7, None)


def test_zombies_are_counted_against_the_worker_that_held_them(storage: Storage) -> None:
    WorkerPresence(storage, _identity("doomed")).record(0, starting=True)
    WorkerPresence(storage, _identity("bystander")).record(0, starting=True)
    storage.enqueue_many([EnqueueRequest(type="t_v1", payload=json.dumps({"n": i})) for i in range(3)])
    held = storage.fetch("doomed", 3, start=True)
    assert len(held) == 3
    directory = WorkerDirectory(storage)
    assert {w.worker_id: (w.holding, w.zombies) for w in directory.list()} == {"doomed": (3, 0), "bystander": (0, 0)}
    # Two of its jobs' heartbeats expire; the sweep takes them for zombies.
    expired = sorted(j.id for j in held)[:2]
    db_now = storage.ping()
    storage.write(
        lambda c: c.execute(
            update(jobs_hot).where(jobs_hot.c.Id.in_(expired)).values(HeartbeatUtc=db_now - timedelta(hours=1))
        )
    )
    assert storage.sweep(fetched_timeout=600, zombie_timeout=60, max_attempts=3).archived == 2
    doomed = directory.get("doomed")
    assert doomed is not None and (doomed.holding, doomed.zombies) == (1, 2)
    assert sorted(j.id for j in doomed.zombie_jobs) == expired and {j.status for j in doomed.zombie_jobs} == {"Zombie"}
    assert [j.id for j in doomed.held_jobs] == sorted(set(j.id for j in held) - set(expired))
    assert directory.get("nobody") is None


def test_a_tick_sends_at_most_one_presence_statement(db_url: str) -> None:
    app, release = _holding_app(db_url)
    app.enqueue("hold_v1", {})
    worker = app.worker(worker_id="counted")
    ticks = 0
    tick = worker.heartbeat.tick

    async def counted_tick() -> None:
        nonlocal ticks
        ticks += 1
        await tick()

    worker.heartbeat.tick = counted_tick  # type: ignore[method-assign]
    upserts: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "Workers" in statement and not statement.lstrip().upper().startswith("SELECT"):
            upserts.append(json.dumps(statement[:30]))

    event.listen(app.storage.engine, "before_cursor_execute", seen)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: ticks >= 10 and worker.running)
    finally:
        release.set()
        worker.stop()
        thread.join(30)
    ticked = ticks
    # One at start, one per tick that wrote (never more than the ticks), one at the exit.
    assert 1 <= worker.presence.writes <= ticked
    assert len(upserts) == 1 + worker.presence.writes + 1


def test_migration_7_brings_a_version_6_database_the_workers_table(db_url: str) -> None:
    s = Storage(db_url)
    s.upgrade()
    schema = s.profile.table_schema
    # As a version 6 database was: no Workers table, no zombie index, no record of step 7.
    s.write(lambda c: c.execute(DropIndex(zombie_worker_index)))
    s.write(lambda c: c.execute(DropTable(workers)))
    s.write(lambda c: c.execute(delete(schema_migrations).where(schema_migrations.c.Version == 7)))
    assert not inspect(s.engine).has_table("Workers", schema=schema)
    assert s.upgrade() == [7]
    assert inspect(s.engine).has_table("Workers", schema=schema)
    dlq_indexes = {i["name"] for i in inspect(s.engine).get_indexes("JobsDLQ", schema=schema)}
    assert "IX_JobsDLQ_ZombieWorker" in dlq_indexes
    WorkerPresence(s, _identity("after-upgrade")).record(1, starting=True)
    assert [w.worker_id for w in WorkerDirectory(s).list()] == ["after-upgrade"]
    assert s.upgrade() == []
    s.close()
