"""The Deck's console hears what other processes do (issue 36): a ``chokaq sweep`` process rescues
a zombie and a ``chokaq dlq resurrect`` process brings it back; the served Deck's console shows
the seed's lines, with a link to the job, over SSE (the event feed followed by the API)."""

from __future__ import annotations

from typing import Any

from chokaq.domain.models import EnqueueRequest
from tests.acceptance.conftest import run_cli
from tests.deck.conftest import DeckEnv, screenshot
from tests.helpers import age


def test_the_console_shows_a_rescue_and_a_resurrect_done_by_other_processes(deck: DeckEnv, page: Any) -> None:
    from playwright.sync_api import expect

    s = deck.app.storage
    url = str(s.engine.url.render_as_string(hide_password=False))
    page.goto(deck.url + "/deck/")
    expect(page.get_by_test_id("live-status")).to_contain_text("SSE")

    # A job a vanished worker left Processing, its heartbeat long stale.
    job_id, _ = s.enqueue(EnqueueRequest(type="noop_v1", queue="reports", payload="{}", created_by="test"))
    (fetched,) = s.fetch("ghost-worker", 1, ["reports"])  # the test worker does not serve "reports"
    assert [j.id for j in s.start("ghost-worker", [fetched]).started] == [job_id]
    age(s, job_id, 3600)
    out = run_cli(url, "sweep")
    assert out.returncode == 0 and '"archived": 1' in out.stdout, out.stderr

    console = page.get_by_test_id("console")
    expect(console).to_contain_text("ZombieRescue: recovered 0 abandoned, archived 1 zombie")
    rescue_line = console.locator('li[data-kind="zombie.rescue"]')
    link = rescue_line.locator(f'[data-testid="console-job"]:text-is("{job_id}")')
    expect(link).to_have_count(1)
    expect(page.get_by_test_id("hdr-dlq")).to_have_text("1")

    out = run_cli(url, "dlq", "resurrect", job_id, "--yes", "--actor", "cli:ops")
    assert out.returncode == 0, out.stderr
    expect(console).to_contain_text(f"Job {job_id} resurrected by cli:ops")
    screenshot(page, f"{deck.db}-console-other-processes")

    link.click()  # the console's link opens the job
    expect(page.get_by_test_id("inspector")).to_contain_text(job_id)
