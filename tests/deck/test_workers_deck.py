"""The Deck's Workers page in a real browser: live, stopped and lost workers with the jobs each holds
and its zombies; one worker's jobs at #/workers/ID; and a zombie's worker id in the inspector that
leads there."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update

from chokaq.domain.workers import WorkerIdentity
from chokaq.storage import WorkerDirectory, WorkerPresence
from chokaq.storage.schema import workers
from tests.deck.conftest import DeckEnv, screenshot
from tests.deck.test_deck import make_zombie
from tests.helpers import wait_for

pytestmark = pytest.mark.browser


def _expect() -> Any:
    from playwright.sync_api import expect

    return expect


def test_workers_page_shows_states_jobs_held_and_zombies(deck: DeckEnv, page: Any) -> None:
    expect = _expect()
    s = deck.app.storage
    directory = WorkerDirectory(s)
    # The fixture's real worker records itself live.
    wait_for(lambda: (w := directory.get("deck-test-worker")) is not None and w.state == "live")
    # A worker that exited cleanly.
    old = WorkerPresence(s, WorkerIdentity("old-worker", "box-2", 12, "0.1.0", ("mail",), 2))
    old.record(0, starting=True)
    old.stopped()
    # A worker that went silent an hour ago holding a job: the sweep takes the job for a zombie and
    # marks the worker lost.
    WorkerPresence(s, WorkerIdentity("ghost-worker", "box-3", 13, "0.1.0", ("reports",), 1)).record(1, starting=True)
    db_now = s.ping()
    s.write(
        lambda c: c.execute(
            update(workers).where(workers.c.WorkerId == "ghost-worker").values(LastSeenUtc=db_now - timedelta(hours=1))
        )
    )
    zombie_id = make_zombie(deck)  # a real sweep, which also marks the silent worker lost
    ghost = directory.get("ghost-worker")
    assert ghost is not None and ghost.state == "lost" and ghost.zombies == 1

    page.goto(deck.url + "/deck/")
    page.get_by_test_id("nav-workers").click()
    view = page.locator('[data-view="workers"]')

    def row(worker_id: str) -> Any:
        return view.locator(f'[data-testid="worker-row"][data-worker="{worker_id}"]')

    expect(row("deck-test-worker").get_by_test_id("worker-state")).to_have_text("live")
    expect(row("old-worker").get_by_test_id("worker-state")).to_have_text("stopped")
    expect(row("ghost-worker").get_by_test_id("worker-state")).to_have_text("lost")
    expect(row("ghost-worker").get_by_test_id("worker-zombies")).to_have_text("1")
    expect(row("ghost-worker").get_by_test_id("worker-holding")).to_have_text("0")
    expect(row("ghost-worker")).to_contain_text("reports")
    expect(page.get_by_test_id("workers-lost-after")).to_have_text("10m 0s")
    # Live first, then lost, then stopped.
    order = view.locator('[data-testid="worker-row"]').evaluate_all("rows => rows.map(r => r.dataset.worker)")
    assert order == ["deck-test-worker", "ghost-worker", "old-worker"]
    screenshot(page, f"{deck.db}-workers")

    # The DLQ's zombie names its worker; the link leads to that worker's page with the zombie listed.
    page.get_by_test_id("nav-dlq").click()
    dlq_row = page.locator(f'[data-view="dlq"] [data-testid="row"][data-id="{zombie_id}"]')
    dlq_row.get_by_test_id("open-job").click()
    insp = page.get_by_test_id("inspector")
    link = insp.get_by_test_id("insp-z-worker").get_by_test_id("insp-worker-link")
    expect(link).to_have_text("ghost-worker")
    link.click()
    expect(page).to_have_url(re.compile(r"#/workers/ghost-worker$"))
    expect(insp).to_be_hidden()
    expect(page.get_by_test_id("worker-detail-name")).to_contain_text("ghost-worker")
    expect(row("ghost-worker")).to_have_class(re.compile("is-open"))
    zombies = page.get_by_test_id("worker-zombie-jobs")
    expect(zombies.locator(f'[data-testid="worker-job"][data-id="{zombie_id}"]')).to_contain_text("Zombie")
    expect(page.get_by_test_id("worker-held")).to_contain_text("No job under its id now.")

    # A worker the database never heard of (or pruned): said so, not an error.
    page.goto(deck.url + "/deck/#/workers/nobody")
    expect(page.get_by_test_id("worker-missing")).to_contain_text("No worker nobody is recorded")
