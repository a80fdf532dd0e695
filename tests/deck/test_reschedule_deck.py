"""The inspector's reschedule: a Pending job made due now (the worker then runs it), and moved to
a time picked in the browser's own time zone (sent as an instant: the stored UTC is the zone's)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from chokaq.domain.models import EnqueueRequest
from tests.deck.conftest import DeckEnv

pytestmark = pytest.mark.browser

PARIS = ZoneInfo("Europe/Paris")


def test_run_now_and_reschedule_from_the_inspector(deck: DeckEnv, browser: Any) -> None:
    from playwright.sync_api import expect

    storage = deck.app.storage
    later, _ = storage.enqueue(EnqueueRequest(type="noop_v1", payload="{}", delay_seconds=3600, created_by="t"))
    moved, _ = storage.enqueue(EnqueueRequest(type="noop_v1", payload="{}", delay_seconds=3600, created_by="t"))
    context = browser.new_context(viewport={"width": 1280, "height": 860}, timezone_id="Europe/Paris")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(deck.url + "/deck/#/hot")
        insp = page.get_by_test_id("inspector")

        # Run now: due at once, the worker (serving "default") takes it and archives it.
        page.locator(f'[data-view="hot"] [data-testid="row"][data-id="{later}"]').get_by_test_id("open-job").click()
        expect(insp.get_by_test_id("insp-location")).to_contain_text("hot · Pending")
        insp.get_by_test_id("insp-run-now").click()
        expect(insp.get_by_test_id("insp-location")).to_contain_text("archive")
        expect(insp.get_by_test_id("insp-audit")).to_contain_text("job.reschedule")
        insp.get_by_test_id("insp-close").click()

        # Reschedule to 09:00 Paris time, 200 days ahead (the other side of a DST change from today).
        local = (datetime.now(PARIS) + timedelta(days=200)).replace(hour=9, minute=0, second=0, microsecond=0)
        page.locator(f'[data-view="hot"] [data-testid="row"][data-id="{moved}"]').get_by_test_id("open-job").click()
        expect(insp.get_by_test_id("insp-location")).to_contain_text("hot · Pending")
        insp.get_by_test_id("insp-at").fill(local.strftime("%Y-%m-%dT%H:%M:%S"))
        insp.get_by_test_id("insp-reschedule-at").click()
        expect(insp.get_by_test_id("insp-status")).to_have_text("Rescheduled.")
        expect(insp.get_by_test_id("insp-audit")).to_contain_text("job.reschedule")
        rec = storage.get_job(moved)
        assert rec is not None and rec.scheduled_at_utc is not None
        assert rec.scheduled_at_utc.replace(microsecond=0) == local.astimezone(UTC).replace(tzinfo=None)
    finally:
        context.close()
    assert not errors, errors
