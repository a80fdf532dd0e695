"""The inspector shows a job's logs and progress bar, live while it is Processing (each stats tick
of the event stream reloads it), and hostile log text stays inert text (Playwright, real browser)."""

from __future__ import annotations

from typing import Any

from chokaq.domain.job_logs import JobNotes, LogLimits, Notes, encode_line
from chokaq.domain.models import EnqueueRequest
from chokaq.storage.store import Completion
from tests.deck.conftest import DeckEnv, screenshot
from tests.deck.test_deck import _expect, row

HOSTILE = '<img src=x onerror="window.__pwned=1"> \x1b[31mred\u202eevil\x00 postgres://u:hunter2@db/x \udc80'


def _written(notes: JobNotes) -> Notes:
    logs, progress, mark = notes.unwritten()
    notes.written(mark)
    return Notes(logs, progress)


def test_the_inspector_follows_a_running_jobs_logs_and_progress(deck: DeckEnv, page: Any) -> None:
    expect = _expect()
    s = deck.app.storage
    job_id, _ = s.enqueue(EnqueueRequest(type="noop_v1", queue="reports", payload="{}", created_by="test"))
    (fetched,) = s.fetch("ghost-worker", 1, ["reports"])  # the test worker does not serve "reports"
    (running,) = s.start("ghost-worker", [fetched]).started
    notes = JobNotes(LogLimits(max_lines=3), running.attempt_count, "ghost-worker")
    notes.add(encode_line("INFO", "downloaded the file", {"bytes": 1024}))
    notes.set_progress(1, 4, "one of four")
    assert s.heartbeat("ghost-worker", [running.lease], {job_id: _written(notes)}) == {job_id}

    page.goto(deck.url + "/deck/#/hot")
    row(page, "hot", job_id).get_by_test_id("open-job").click()
    insp = page.get_by_test_id("inspector")
    lines = insp.get_by_test_id("insp-log-line")
    expect(lines).to_have_count(1)
    expect(lines.nth(0)).to_contain_text("INFO downloaded the file bytes=1024")
    expect(insp.get_by_test_id("insp-logs-live")).to_be_visible()
    expect(insp.get_by_test_id("insp-progress-bar")).to_have_attribute("max", "4")
    expect(insp.get_by_test_id("insp-progress-text")).to_have_text("1 of 4 (25%) · one of four")

    # The worker's next heartbeat: the open inspector catches up with no click (the stream's tick).
    notes.add(encode_line("WARNING", HOSTILE, {"url": "https://x:secret@h/"}, "app.parser"))
    notes.add(encode_line("INFO", "parsed", None))
    notes.add(encode_line("INFO", "stored", None))  # the fourth line: the oldest goes (3 kept)
    notes.set_progress(3, 4)
    assert s.heartbeat("ghost-worker", [running.lease], {job_id: _written(notes)}) == {job_id}
    expect(lines).to_have_count(3)
    expect(insp.get_by_test_id("insp-logs-dropped")).to_contain_text("1 earlier line(s) dropped")
    expect(insp.get_by_test_id("insp-progress-text")).to_have_text("3 of 4 (75%)")
    hostile = lines.nth(0)
    expect(hostile).to_contain_text('WARNING app.parser <img src=x onerror="window.__pwned=1">')
    # Controls and direction overrides shown as escapes; secrets masked; NUL and the lone surrogate
    # stored as escapes by the worker.
    expect(hostile).to_contain_text("\\u001b[31mred\\u202eevil\\x00 postgres://u:***@db/x \\udc80")
    expect(hostile).to_contain_text('url="https://x:***@h/"')
    assert page.evaluate("window.__pwned") is None
    assert insp.locator("img").count() == 0
    screenshot(page, f"{deck.db}-job-logs-live")

    # The attempt ends: the archive keeps the lines the last heartbeat had not written.
    notes.add(encode_line("INFO", "done", None))
    notes.set_progress(4, 4)
    logs, progress, _ = notes.unwritten()
    assert s.complete("ghost-worker", [Completion(running.lease, 5, Notes(logs, progress))]) == {job_id}
    expect(insp.get_by_test_id("insp-location")).to_contain_text("archive")
    expect(lines.nth(2)).to_contain_text("done")
    expect(insp.get_by_test_id("insp-logs-live")).to_have_count(0)
    expect(insp.get_by_test_id("insp-progress-text")).to_have_text("4 of 4 (100%)")
