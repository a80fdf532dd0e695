"""Storage.add_announcer: the after-commit hook behind the Functions doorbell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chokaq.domain.models import EnqueueRequest
from chokaq.runtime.doorbell import Doorbell
from chokaq.storage import Storage


def storage(tmp_path: Path) -> Storage:
    s = Storage(f"sqlite:///{tmp_path / 'a.db'}")
    s.upgrade()
    return s


def test_announcers_hear_each_commit_with_queue_and_delay(tmp_path: Path) -> None:
    s = storage(tmp_path)
    heard: list[Any] = []
    unsubscribe = s.add_announcer(heard.append)
    s.enqueue(EnqueueRequest(type="t", payload="{}", queue="a"))
    s.enqueue_many(
        [
            EnqueueRequest(type="t", payload="{}", queue="b", delay_seconds=30),
            EnqueueRequest(type="t", payload="{}", queue="b", delay_seconds=5),
            EnqueueRequest(type="t", payload="{}", queue="c"),
        ]
    )
    s.announce()  # what a resurrect does: the queues are not known
    unsubscribe()
    s.enqueue(EnqueueRequest(type="t", payload="{}", queue="a"))
    assert heard == [{"a": 0.0}, {"b": 5.0, "c": 0.0}, None]
    s.close()


def test_a_failing_announcer_never_fails_the_enqueue(tmp_path: Path) -> None:
    s = storage(tmp_path)

    def broken(due: object) -> None:
        raise RuntimeError("transport down")

    s.add_announcer(broken)
    job_id, created = s.enqueue(EnqueueRequest(type="t", payload="{}", queue="a"))
    assert created and s.get_job(job_id) is not None
    s.close()


def test_doorbell_counts_failed_rings_and_keeps_going(tmp_path: Path) -> None:
    sent: list[tuple[str, float]] = []
    fail = [True]

    def send(queue: str, delay: float) -> None:
        if fail[0]:
            raise ConnectionRefusedError("[Errno 111] Connection refused")
        sent.append((queue, delay))

    bell = Doorbell(send, interval=0.05)
    bell({"a": 0.0})
    assert bell.flush(10) and bell.failed == 1 and sent == []
    fail[0] = False
    bell({"a": 0.0})
    bell(None)
    assert bell.flush(10) and bell.sent == 2
    assert sorted(q for q, _ in sent) == ["*", "a"]
    bell.close()
    bell({"a": 0.0})  # after close: ignored, never raises
    assert bell.sent == 2
