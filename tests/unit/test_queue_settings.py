"""Storage.update_queue: a setting not named stays as it is, None clears an override."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chokaq.domain.models import EnqueueRequest
from chokaq.storage import Storage
from chokaq.storage.queues import UNSET, queue_values


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    s = Storage(f"sqlite:///{tmp_path / 'q.db'}")
    s.upgrade()
    try:
        yield s
    finally:
        s.close()


def test_a_setting_left_out_stays_and_none_clears_it(storage: Storage) -> None:
    info = storage.update_queue("q", zombie_timeout_seconds=30, max_workers=2)
    assert (info.is_paused, info.zombie_timeout_seconds, info.max_workers) == (False, 30, 2)
    info = storage.update_queue("q", paused=True)
    assert (info.is_paused, info.zombie_timeout_seconds, info.max_workers) == (True, 30, 2)
    info = storage.update_queue("q", max_workers=None)
    assert (info.is_paused, info.zombie_timeout_seconds, info.max_workers) == (True, 30, None)
    assert [q.name for q in storage.list_queues()] == ["q"]


def test_only_the_named_settings_are_written() -> None:
    assert set(queue_values(None, UNSET, UNSET)) == {"LastUpdatedUtc"}
    assert set(queue_values(False, None, UNSET)) == {"LastUpdatedUtc", "IsPaused", "ZombieTimeoutSeconds"}


def test_a_new_limit_is_claimed_under_at_once(storage: Storage) -> None:
    # The cached list of MaxWorkers queues is forgotten by the change that makes one, so the very
    # next claim already counts the queue's limit.
    storage.enqueue_many([EnqueueRequest(type="t", queue="lim") for _ in range(3)])
    storage.fetch("w0", 1)  # reads (and caches) the MaxWorkers list: none yet
    storage.update_queue("lim", max_workers=2)
    assert len(storage.fetch("w1", 10)) == 1  # one was already Fetched by w0
