"""The step journal in the Deck: the inspector lists a zombie's steps (done with its result,
started and never confirmed), and its resurrect asks what becomes of them: from scratch clears the
journal, a payload edit keeps it only when asked; each choice lands in the audit."""

from __future__ import annotations

from typing import Any

import pytest

from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import FailureReason, Location
from chokaq.storage.steps import finish_step, load_steps, start_step
from tests.deck.conftest import DeckEnv

pytestmark = pytest.mark.browser


def zombie_with_steps(deck: DeckEnv, worker: str = "ghost-worker") -> str:
    # Queue "reports": no worker here serves it, so a resurrected job stays Pending.
    s = deck.app.storage
    job_id, _ = s.enqueue(EnqueueRequest(type="report_v1", queue="reports", payload='{"n": 1}'))
    (rec,) = s.start(worker, s.fetch(worker, 1, ["reports"])).started
    assert start_step(s, rec.lease, "charge", again=False)
    assert finish_step(s, rec.lease, "charge", '{"charge": "ch_<b>1</b>"}')
    assert start_step(s, rec.lease, "email", again=False)
    assert s.fail(rec.lease, FailureReason.ZOMBIE, "Zombie detected: heartbeat expired")
    return job_id


def test_the_inspector_shows_the_steps_and_resurrect_asks_about_them(deck: DeckEnv, page: Any) -> None:
    from playwright.sync_api import expect

    storage = deck.app.storage
    scratch, kept = zombie_with_steps(deck), zombie_with_steps(deck)
    page.goto(deck.url + "/deck/#/dlq")
    insp = page.get_by_test_id("inspector")
    page.locator(f'[data-view="dlq"] [data-testid="row"][data-id="{scratch}"]').get_by_test_id("open-job").click()
    steps = insp.get_by_test_id("insp-step")
    expect(steps).to_have_count(2)
    expect(steps.nth(0)).to_contain_text("charge")
    expect(steps.nth(0)).to_contain_text("done")
    expect(steps.nth(0)).to_contain_text('{"charge":"ch_<b>1</b>"}')  # a result is text, never markup
    expect(steps.nth(0)).to_contain_text("ghost-worker")
    expect(steps.nth(1)).to_contain_text("started, never confirmed")
    expect(insp.get_by_test_id("insp-steps-unknown")).to_contain_text("1 step(s) started and never confirmed")

    # From scratch: the dialog's second choice; the journal is cleared and the audit says so.
    insp.get_by_test_id("insp-resurrect").click()
    dialog = page.get_by_test_id("steps-dialog")
    expect(dialog).to_contain_text("1 of 2 step(s) finished")
    expect(dialog.get_by_test_id("steps-resume")).to_be_checked()
    expect(dialog.get_by_test_id("steps-keep")).to_have_count(0)  # no payload edit: nothing to keep
    dialog.get_by_test_id("steps-scratch").check()
    dialog.get_by_test_id("steps-ok").click()
    expect(insp.get_by_test_id("insp-location")).to_contain_text("hot · Pending")
    expect(insp.get_by_test_id("insp-audit")).to_contain_text('"steps":"scratch"')
    expect(insp.get_by_test_id("insp-step")).to_have_count(0)
    assert load_steps(storage, scratch) == []
    insp.get_by_test_id("insp-close").click()

    # A payload edit, resumed with "keep the steps": the journal stays.
    page.get_by_test_id("nav-dlq").click()
    page.locator(f'[data-view="dlq"] [data-testid="row"][data-id="{kept}"]').get_by_test_id("open-job").click()
    expect(insp.get_by_test_id("insp-step")).to_have_count(2)
    insp.get_by_test_id("insp-payload").fill('{"n": 2}')
    insp.get_by_test_id("insp-resurrect").click()
    dialog = page.get_by_test_id("steps-dialog")
    dialog.get_by_test_id("steps-keep").check()
    dialog.get_by_test_id("steps-ok").click()
    expect(insp.get_by_test_id("insp-location")).to_contain_text("hot · Pending")
    expect(insp.get_by_test_id("insp-audit")).to_contain_text('"keep_steps":true')
    assert [(s.name, s.state) for s in load_steps(storage, kept)] == [("charge", "done"), ("email", "started")]
    rec = storage.get_job(kept)
    assert rec is not None and rec.location is Location.HOT and rec.payload == '{"n": 2}'


def test_an_incident_is_resumed_as_one_previewed_decision(deck: DeckEnv, page: Any) -> None:
    from playwright.sync_api import expect

    storage = deck.app.storage
    first = [zombie_with_steps(deck, "host-a"), zombie_with_steps(deck, "host-a")]
    other = zombie_with_steps(deck, "host-b")
    page.goto(deck.url + "/deck/#/incidents")
    rows = page.get_by_test_id("incident-row")
    expect(rows).to_have_count(2)
    a = page.locator('[data-testid="incident-row"][data-worker="host-a"]')
    expect(a).to_contain_text("2 inside a step · 0 between steps · 0 without steps")
    a.get_by_test_id("incident-resume").click()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_contain_text("worker = host-a")
    expect(dialog).to_contain_text("2 jobs match this filter")
    dialog.get_by_test_id("confirm-ok").click()
    # Decided, the incident stays on the record: its two zombies, resurrected, nothing left to decide.
    expect(a).to_have_attribute("data-open", "no")
    expect(a.get_by_test_id("incident-taken")).to_have_text("2 resurrected")
    expect(a.get_by_test_id("incident-resume")).to_have_count(0)
    expect(rows).to_have_count(2)
    b = page.locator('[data-testid="incident-row"][data-worker="host-b"]')
    expect(b).to_have_attribute("data-open", "yes")
    expect(b.get_by_test_id("incident-resume")).to_be_visible()
    for job_id in first:
        rec = storage.get_job(job_id)
        assert rec is not None and rec.location is Location.HOT
        assert [s.state for s in load_steps(storage, job_id)] == ["done", "started"]  # resumed: journal kept
    assert storage.get_job(other).location is Location.DLQ  # type: ignore[union-attr]
