"""The Deck's Breakers page in a real browser: an open breaker is listed first, an operator closes
it now (audited, and its jobs can be claimed again), a viewer sees the page with no button."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select

from chokaq.domain.breakers import CLOSED, BreakerPolicy
from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import Location
from chokaq.storage import BreakerStore
from chokaq.storage.schema import audit_log
from tests.deck.conftest import VIEWER_TOKEN, DeckEnv, screenshot
from tests.helpers import wait_for

pytestmark = pytest.mark.browser


def _expect() -> Any:
    from playwright.sync_api import expect

    return expect


def test_breakers_page_shows_open_breakers_and_closes_one(deck: DeckEnv, page: Any) -> None:
    expect = _expect()
    app = deck.app
    store = BreakerStore(app.storage)
    for _ in range(3):
        store.record_failure("noop_v1", BreakerPolicy(failure_threshold=3, open_duration=3600), "worker-7")
    store.record_failure("send_email", BreakerPolicy(failure_threshold=3), "worker-7")
    # The Deck's worker claims as a worker with breakers on does.
    app.storage._claimer.breaker = True
    (job_id,) = app.storage.enqueue_many([EnqueueRequest(type="noop_v1")])

    page.goto(deck.url + "/deck/")
    page.get_by_test_id("nav-breakers").click()
    rows = page.get_by_test_id("breaker-row")
    expect(rows).to_have_count(2)
    expect(rows.first).to_have_attribute("data-breaker", "noop_v1")  # open ones first
    row = page.locator('[data-testid="breaker-row"][data-breaker="noop_v1"]')
    expect(row.get_by_test_id("breaker-state")).to_have_text("Open")
    expect(row).to_contain_text("worker-7")
    closed_row = page.locator('[data-testid="breaker-row"][data-breaker="send_email"]')
    expect(closed_row.get_by_test_id("breaker-state")).to_have_text("Closed")
    assert closed_row.get_by_test_id("breaker-close").count() == 0
    screenshot(page, f"{deck.db}-breakers")
    job = app.storage.get_job(job_id)
    assert job is not None and job.location is Location.HOT and job.attempt_count == 0  # open: not claimed

    row.get_by_test_id("breaker-close").click()
    expect(page.get_by_test_id("flash")).to_contain_text("Breaker of noop_v1 closed")
    expect(row.get_by_test_id("breaker-state")).to_have_text("Closed")
    assert {b.job_type: b.state for b in store.every()}["noop_v1"] == CLOSED
    wait_for(lambda: (j := app.storage.get_job(job_id)) is not None and j.location is Location.ARCHIVE)

    def audit(c: Any) -> list[tuple[str, str]]:
        return [
            (r[0], json.loads(r[1])["job_type"]) for r in c.execute(select(audit_log.c.Action, audit_log.c.Details))
        ]

    assert app.storage.read(audit) == [("breaker.close", "noop_v1")]

    # A viewer sees the list, and no button that changes anything.
    for _ in range(3):
        store.record_failure("noop_v1", BreakerPolicy(failure_threshold=3, open_duration=3600), "worker-7")
    page.goto(deck.auth_url + "/deck/")
    page.get_by_test_id("signin-token").fill(VIEWER_TOKEN)
    page.get_by_test_id("signin-submit").click()
    expect(page.get_by_test_id("who")).to_have_text("vera · viewer")
    page.get_by_test_id("nav-breakers").click()
    expect(row.get_by_test_id("breaker-state")).to_have_text("Open")
    assert page.locator('[data-view="breakers"] button').count() == 0
