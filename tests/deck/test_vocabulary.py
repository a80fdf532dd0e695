"""The Deck's words and numbers are GET /api/meta's: what it offers matches what the API serves, and a
word the API serves (and the Deck never heard of) shows up on the page."""

from __future__ import annotations

from typing import Any

import pytest

from chokaq.domain.models import EnqueueRequest
from tests.deck.conftest import DeckEnv
from tests.deck.test_deck import cancelled_jobs, row

pytestmark = pytest.mark.browser


def _expect() -> Any:
    from playwright.sync_api import expect

    return expect


def values(page: Any, selector: str) -> list[str]:
    result: list[str] = page.locator(selector).evaluate_all("els => els.map((e) => e.value)")
    return result


def test_the_decks_choices_are_the_ones_api_meta_serves(deck: DeckEnv, page: Any) -> None:
    expect = _expect()
    deck.app.storage.enqueue(EnqueueRequest(type="noop_v1", payload="{}", delay_seconds=3600, created_by="t"))
    page.goto(deck.url + "/deck/#/hot")
    meta = page.request.get(deck.url + "/api/meta").json()
    lim = meta["limits"]
    hot = page.locator('[data-view="hot"]')
    expect(hot.get_by_test_id("filter-status")).to_be_visible()
    assert values(page, '[data-view="hot"] [data-testid="filter-status"] option') == ["", *meta["job_statuses"]]
    assert values(page, '[data-view="hot"] [data-testid="page-size"] option') == [str(n) for n in lim["page_sizes"]]
    expect(hot.get_by_test_id("page-size")).to_have_value(str(lim["page_size_default"]))

    page.get_by_test_id("nav-dlq").click()
    reasons = '[data-view="dlq"] [data-testid="filter-failure_reason"] option'
    expect(page.locator(reasons)).to_have_count(1 + len(meta["failure_reasons"]))
    assert values(page, reasons) == ["", *meta["failure_reasons"]]

    page.get_by_test_id("nav-overview").click()
    windows = '[data-testid="overview-history-window"] option'
    expect(page.locator(windows)).to_have_count(len(meta["history_windows"]))
    assert values(page, windows) == [w["name"] for w in meta["history_windows"]]
    expect(page.locator(windows).first).to_have_text("last hour (1 min buckets)")

    page.get_by_test_id("nav-queues").click()
    first = page.get_by_test_id("queue-row").first
    for field in ("max_workers", "zombie_timeout_seconds"):
        box = first.get_by_test_id(f"queue-{field}")
        expect(box).to_have_attribute("min", str(lim[f"{field}_min"]))
        expect(box).to_have_attribute("max", str(lim[f"{field}_max"]))


def test_the_deck_shows_what_only_api_meta_said(deck: DeckEnv, page: Any) -> None:
    """/api/meta answered with a failure reason, a status and a page size the code does not have, and
    without purge among the admin's endpoints: the Deck offers the new words and hides Purge."""
    expect = _expect()
    dead = cancelled_jobs(deck, 1)[0]

    def altered_meta(route: Any) -> None:
        response = route.fetch()
        meta = response.json()
        meta["failure_reasons"].append("MetaOnlyReason")
        meta["job_statuses"].append("MetaOnlyStatus")
        meta["limits"]["page_sizes"] = [7, *meta["limits"]["page_sizes"]]
        for role in meta["roles"]:
            role["may"] = [ep for ep in role["may"] if ep != "POST /api/dlq/purge"]
        route.fulfill(response=response, json=meta)

    page.route("**/api/meta", altered_meta)
    page.goto(deck.url + "/deck/#/dlq")
    expect(page.get_by_test_id("who")).to_contain_text("admin")  # dev_open: the caller is an admin
    dlq = page.locator('[data-view="dlq"]')
    expect(dlq.get_by_test_id("filter-failure_reason").locator('option[value="MetaOnlyReason"]')).to_have_count(1)
    expect(dlq.get_by_test_id("page-size").locator("option").first).to_have_text("7 per page")

    # An admin by rank, but /api/meta lists no purge for the role: no Purge anywhere, the rest stays.
    expect(dlq.get_by_test_id("bulk-resurrect")).to_be_visible()
    assert dlq.get_by_test_id("bulk-purge").count() == 0 and dlq.get_by_test_id("filter-purge").count() == 0
    row(page, "dlq", dead).get_by_test_id("open-job").click()
    insp = page.get_by_test_id("inspector")
    expect(insp.get_by_test_id("insp-resurrect")).to_be_visible()
    expect(insp.get_by_test_id("insp-force")).to_be_visible()  # force is by rank (the API checks it inside)
    assert insp.get_by_test_id("insp-purge").count() == 0

    page.get_by_test_id("nav-hot").click()
    status = page.locator('[data-view="hot"]').get_by_test_id("filter-status")
    expect(status.locator('option[value="MetaOnlyStatus"]')).to_have_count(1)
