"""The Deck's history charts in Chromium: as many points as the API returned buckets, the API's
numbers on hover, a failure arriving over SSE moving the last bucket, no console errors and no
CSP violations (the page fixture also fails the test on any)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert

from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import FailureReason
from chokaq.storage.schema import jobs_archive, jobs_dlq
from tests.deck.conftest import DeckEnv, screenshot
from tests.deck.test_deck import MALFORMED

pytestmark = pytest.mark.browser
DASH = "\u2013"  # the readout's "11:05\u201311:06 UTC"


def _expect() -> Any:
    from playwright.sync_api import expect

    return expect


def _parse(s: str) -> datetime:
    return datetime.fromisoformat(s.removesuffix("Z"))


def seed_history(deck: DeckEnv, at: datetime) -> None:
    """7 jobs succeeded and 3 dead-lettered (2 Zombie, 1 MaxRetriesExceeded) at ``at``, 2 more
    succeeded ten minutes earlier."""

    def job(i: int, when: datetime, wait_ms: int) -> dict[str, Any]:
        return {
            "Id": f"CH{i:024d}",
            "Queue": "default",
            "Type": "noop_v1",
            "Payload": "{}",
            "AttemptCount": 1,
            "CreatedAtUtc": when - timedelta(milliseconds=wait_ms + 30),
            "StartedAtUtc": when - timedelta(milliseconds=30),
            "FinishedAtUtc": when,
            "DurationMs": 30,
        }

    archive = [job(i, at, 120) for i in range(7)] + [job(10 + i, at - timedelta(minutes=10), 4000) for i in range(2)]
    reasons = [FailureReason.ZOMBIE, FailureReason.ZOMBIE, FailureReason.MAX_RETRIES_EXCEEDED]
    dlq = [
        {
            "Id": f"CD{i:024d}",
            "Queue": "default",
            "Type": "noop_v1",
            "Payload": "{}",
            "AttemptCount": 1,
            "FailureReason": int(r),
            "CreatedAtUtc": at - timedelta(seconds=1),
            "FailedAtUtc": at,
        }
        for i, r in enumerate(reasons)
    ]
    with deck.app.storage.engine.begin() as c:
        c.execute(insert(jobs_archive), archive)
        c.execute(insert(jobs_dlq), dlq)


def api_history(page: Any, deck: DeckEnv, window: str) -> dict[str, Any]:
    r = page.request.get(f"{deck.url}/api/stats/history?window={window}")
    assert r.status == 200, r.text()
    body: dict[str, Any] = r.json()
    return body


def hover_bucket(page: Any, chart: Any, at: datetime) -> None:
    """Move the pointer over the centre of the bucket holding ``at``, in the window the page drew."""
    start, end = _parse(chart.get_attribute("data-start")), _parse(chart.get_attribute("data-end"))
    n = int(chart.get_attribute("data-points"))
    size = (end - start) / n
    i = int((at - start) / size)
    box = chart.locator(".u-over").bounding_box()
    page.mouse.move(box["x"] + box["width"] * (i + 0.5) / n, box["y"] + box["height"] / 2)


def test_overview_charts_match_the_api_and_move_on_a_live_failure(deck: DeckEnv, page: Any) -> None:
    expect = _expect()
    console_errors: list[str] = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    now = deck.app.storage.ping()
    at = now - timedelta(minutes=20)
    seed_history(deck, at)

    page.goto(deck.url + "/deck/#/overview")
    expect(page.get_by_test_id("live-status")).to_have_attribute("data-mode", "sse")
    throughput = page.get_by_test_id("chart-throughput")
    wait = page.get_by_test_id("chart-wait")
    api = api_history(page, deck, "1h")
    assert len(api["buckets"]) == 60
    # As many points as buckets, in both charts, and a canvas drawn.
    expect(throughput).to_have_attribute("data-points", str(len(api["buckets"])))
    expect(wait).to_have_attribute("data-points", str(len(api["buckets"])))
    assert throughput.locator("canvas").bounding_box()["width"] > 300

    # Hover the seeded bucket: the readout shows that bucket's numbers, as the API gave them.
    hover_bucket(page, throughput, at)
    readout = page.get_by_test_id("chart-throughput-readout")
    expect(readout).to_contain_text("7 succeeded")
    label = readout.inner_text().split(" UTC:")[0].split(DASH)[0]
    bucket = next(b for b in api_history(page, deck, "1h")["buckets"] if b["start_utc"][11:16] == label)
    assert bucket["succeeded"] == 7 and bucket["failed"] == {"Zombie": 2, "MaxRetriesExceeded": 1}
    span = f"{label}{DASH}{_end_label(bucket, 60)} UTC"
    expect(readout).to_have_text(f"{span}: 7 succeeded, 1 MaxRetriesExceeded, 2 Zombie")
    hover_bucket(page, wait, at)
    wait_readout = page.get_by_test_id("chart-wait-readout")
    expect(wait_readout).to_contain_text(f"{label}{DASH}")
    p50, p95 = bucket["wait_p50_ms"], bucket["wait_p95_ms"]
    assert 100 <= p50 <= 200 and 100 <= p95 <= 200
    expect(wait_readout).to_contain_text(f"wait p50 {round(p50)} ms, p95 {round(p95)} ms (7 jobs), mean run 30 ms")
    # The text summaries carry the same totals for screen readers.
    expect(page.get_by_test_id("chart-throughput-summary")).to_contain_text("9 succeeded, 3 dead-lettered")
    expect(page.get_by_test_id("chart-throughput-summary")).to_contain_text("MaxRetriesExceeded 1, Zombie 2")
    expect(page.get_by_test_id("overview-history-note")).to_contain_text("purged by retention")
    page.mouse.move(5, 5)
    screenshot(page, "overview-charts")

    # The window picker: 7 days in 1 h buckets (168 points). Its last bucket spans an hour, so a
    # failure and the refetch it triggers land in the same bucket unless an hour turns between
    # them: step clear of the turn first (at most 15 s).
    page.get_by_test_id("overview-history-window").select_option("7d")
    expect(throughput).to_have_attribute("data-points", "168")
    db_now = deck.app.storage.ping()
    into_hour = db_now.minute * 60 + db_now.second
    if into_hour > 3600 - 15:
        time.sleep(3600 - into_hour + 1)
    last_failed = int(throughput.get_attribute("data-last-failed"))
    expect(page.get_by_test_id("chart-throughput-summary")).to_contain_text("3 dead-lettered")

    # A new failure: the worker dead-letters a malformed email (FatalError); the job.failed event
    # arrives over SSE and the chart refetches: the last bucket grows by one.
    deck.app.storage.enqueue(EnqueueRequest(type="email_v1", queue="notifications", payload=MALFORMED))
    expect(throughput).to_have_attribute("data-last-failed", str(last_failed + 1))
    expect(page.get_by_test_id("chart-throughput-summary")).to_contain_text("4 dead-lettered")
    expect(page.get_by_test_id("chart-throughput-summary")).to_contain_text("FatalError 1")
    last = api_history(page, deck, "7d")["buckets"][-1]
    assert last["failed"].get("FatalError") == 1
    assert json.dumps(console_errors) == "[]"


def _end_label(bucket: dict[str, Any], seconds: int) -> str:
    return (_parse(bucket["start_utc"]) + timedelta(seconds=seconds)).strftime("%H:%M")


def test_a_queue_page_shows_that_queue_only(deck: DeckEnv, page: Any) -> None:
    expect = _expect()
    now = deck.app.storage.ping()
    seed_history(deck, now - timedelta(minutes=20))
    page.goto(deck.url + "/deck/#/queues/notifications")
    expect(page.get_by_test_id("queue-history-name")).to_have_text("notifications")
    summary = page.get_by_test_id("queue-history").get_by_test_id("chart-throughput-summary")
    expect(summary).to_contain_text("0 succeeded, 0 dead-lettered")
    page.goto(deck.url + "/deck/#/queues/default")
    expect(summary).to_contain_text("9 succeeded, 3 dead-lettered")
