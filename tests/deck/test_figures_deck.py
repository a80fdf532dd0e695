"""The Overview says when the queue sizes it shows are a reused count of a large table, and how old
(Admin.ExactCountLimit, docs/admin-figures.md); it says nothing extra when they were counted now."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.helpers import make_dead
from tests.deck.conftest import build_app, serve

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("limit", [0, 10_000], ids=["reused", "exact"])
def test_the_overview_says_how_old_a_reused_count_is(db_url: str, page: Any, limit: int) -> None:
    from playwright.sync_api import expect

    app = build_app(db_url)
    app.settings.admin.exact_count_limit = limit
    app.storage.upgrade()
    make_dead(app.storage, 3, queue="notifications")
    server = serve(app, dev_open=True)
    try:
        page.goto(server.url + "/deck/#/overview")
        expect(page.get_by_test_id("card-dlq-value")).to_have_text("3")
        updated = page.get_by_test_id("overview-updated")
        if limit == 0:
            expect(updated).to_contain_text("DLQ sizes counted")
            expect(updated).to_contain_text("s ago")
        else:
            expect(updated).to_contain_text("updated")
            expect(updated).not_to_contain_text("counted")
    finally:
        server.stop()
        app.close()


def test_a_list_past_the_count_cap_shows_its_total_as_at_least(db_url: str, page: Any) -> None:
    """Past Admin.ExactCountLimit matches a list's total is a lower bound: the Deck shows "100+",
    keeps Next open while pages are full, and the exact total once the last page says it."""
    from playwright.sync_api import expect

    app = build_app(db_url)
    app.settings.admin.exact_count_limit = 50
    app.storage.upgrade()
    make_dead(app.storage, 120, queue="notifications")
    server = serve(app, dev_open=True)
    try:
        page.goto(server.url + "/deck/#/dlq")
        dlq = page.locator('[data-view="dlq"]')
        expect(dlq.get_by_test_id("list-total")).to_have_text("100+ jobs")
        expect(dlq.get_by_test_id("pager")).to_contain_text("1\u2013100 of 100+ · page 1 of 1+")
        expect(dlq.get_by_test_id("page-next")).to_be_enabled()
        dlq.get_by_test_id("page-next").click()
        expect(dlq.get_by_test_id("pager")).to_contain_text("101\u2013120 of 120 · page 2 of 2")
        expect(dlq.get_by_test_id("list-total")).to_have_text("120 jobs")
        expect(dlq.get_by_test_id("page-next")).to_be_disabled()
    finally:
        server.stop()
        app.close()
