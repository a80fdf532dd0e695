"""Two workers failing jobs of the same queues at once do not deadlock (PostgreSQL; SQLite runs one
writer at a time). Each move into the DLQ bumps its queue's StatsSummary row in its own statement, so
a batch moved in the order its outcomes arrived ([a, b] in one worker, [b, a] in the other) locked
those rows in opposite orders: the database killed one batch as a deadlock victim (replayed, so
nothing was lost, but a failure storm across queues paid a detection timeout per collision)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import event

from chokaq.domain.models import EnqueueRequest, Lease
from chokaq.domain.states import FailureReason
from chokaq.storage import DeadLetter, Storage


@pytest.fixture
def stores(pg_url: str) -> Iterator[dict[str, Storage]]:
    setup = Storage(pg_url)
    setup.upgrade()
    for queue in ("a", "a", "b", "b"):
        setup.enqueue(EnqueueRequest(type="t", queue=queue))
    setup.close()
    workers = {name: Storage(pg_url) for name in ("w1", "w2")}
    yield workers
    for s in workers.values():
        s.close()


def test_two_batches_of_the_same_queues_in_opposite_orders_do_not_deadlock(stores: dict[str, Storage]) -> None:
    leases: dict[str, dict[str, Lease]] = {}
    for name, s in stores.items():
        jobs = s.fetch(name, 1, ["a"], start=True) + s.fetch(name, 1, ["b"], start=True)
        leases[name] = {j.queue: Lease(j.id, name, 1) for j in jobs}
    # After each batch's first move, wait for the other's first move: with opposite lock orders each
    # then needs the counter row the other holds.
    barrier = threading.Barrier(2, timeout=3)
    errors: list[str] = []
    for s in stores.values():
        first = {"done": False}

        @event.listens_for(s.engine, "after_cursor_execute")
        def after(*args: object, first: dict[str, bool] = first) -> None:
            statement = str(args[2])
            if not first["done"] and "JobsDLQ" in statement:
                first["done"] = True
                # Broken: the other batch waits on our lock, which in one order is all that happens.
                with contextlib.suppress(threading.BrokenBarrierError):
                    barrier.wait()

        @event.listens_for(s.engine, "handle_error")
        def on_error(ctx: object) -> None:
            errors.append(str(getattr(ctx, "original_exception", "")).splitlines()[0])

    moved: dict[str, set[str]] = {}

    def fail(name: str, order: list[str]) -> None:
        letters = [DeadLetter(leases[name][q], FailureReason.FATAL_ERROR, "boom", queue=q) for q in order]
        moved[name] = stores[name].fail_many(letters)

    threads = [
        threading.Thread(target=fail, args=("w1", ["a", "b"])),
        threading.Thread(target=fail, args=("w2", ["b", "a"])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not [e for e in errors if "deadlock" in e.lower()], errors
    assert {name: len(ids) for name, ids in moved.items()} == {"w1": 2, "w2": 2}
    figures = stores["w1"].read(
        lambda c: c.exec_driver_sql('SELECT "Queue", "FailedTotal" FROM chokaq."StatsSummary" ORDER BY 1').all()
    )
    assert [tuple(r) for r in figures] == [("a", 2), ("b", 2)]
