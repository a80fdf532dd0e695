"""The Deck's Schedules page in a real browser: the list, pause and run now for an operator, and a
viewer who sees the same page with no buttons."""

from __future__ import annotations

import re
from typing import Any

import pytest
from sqlalchemy import select

from chokaq.storage import ScheduleStore
from chokaq.storage.schema import audit_log
from tests.deck.conftest import VIEWER_TOKEN, DeckEnv, screenshot
from tests.helpers import wait_for

pytestmark = pytest.mark.browser


def _expect() -> Any:
    from playwright.sync_api import expect

    return expect


def test_schedules_page_lists_pauses_runs_and_hides_buttons_from_viewers(deck: DeckEnv, page: Any) -> None:
    expect = _expect()
    app = deck.app
    app.schedule("nightly-noop", "0 3 * * *", job="noop_v1", tz="Europe/Oslo")
    app.sync_schedules()
    store = ScheduleStore(app.storage)

    page.goto(deck.url + "/deck/")
    page.get_by_test_id("nav-schedules").click()
    row = page.locator('[data-testid="schedule-row"][data-schedule="nightly-noop"]')
    expect(row).to_be_visible()
    expect(row.get_by_test_id("schedule-words")).to_have_text("At 03:00 every day")
    expect(row).to_contain_text("Europe/Oslo")
    expect(row.get_by_test_id("schedule-state")).to_have_text("Active")
    expect(page.get_by_test_id("schedules-note")).to_contain_text("code is the source of truth")

    row.get_by_test_id("schedule-toggle").click()
    expect(row.get_by_test_id("schedule-state")).to_have_text("Paused")
    expect(row.get_by_test_id("schedule-toggle")).to_have_text("Resume")
    assert store.get("nightly-noop").is_paused

    row.get_by_test_id("schedule-run").click()
    expect(page.get_by_test_id("flash")).to_contain_text(re.compile(r"Schedule nightly-noop: job \w+ enqueued\."))
    job_id = wait_for(lambda: store.get("nightly-noop").last_job_id)
    expect(row).to_contain_text(job_id)
    expect(row.get_by_test_id("schedule-outcome")).to_have_text(re.compile("Pending|Processing|Succeeded"))
    assert store.get("nightly-noop").is_paused  # run now does not resume, nor move the slots
    screenshot(page, f"{deck.db}-schedules")

    def actions(c: Any) -> list[str]:
        return [r[0] for r in c.execute(select(audit_log.c.Action).order_by(audit_log.c.Id))]

    assert app.storage.read(actions) == ["schedule.pause", "schedule.run"]

    # A viewer sees the list, and no button that changes anything.
    page.goto(deck.auth_url + "/deck/")
    page.get_by_test_id("signin-token").fill(VIEWER_TOKEN)
    page.get_by_test_id("signin-submit").click()
    expect(page.get_by_test_id("who")).to_have_text("vera · viewer")
    page.get_by_test_id("nav-schedules").click()
    expect(row).to_be_visible()
    expect(row.get_by_test_id("schedule-state")).to_have_text("Paused")
    assert page.locator('[data-view="schedules"] button').count() == 0
    assert page.locator("[data-mutating]").count() == 0
