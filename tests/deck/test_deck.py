"""The Deck in a real browser against a real admin API, worker and database (SQLite and PostgreSQL).

Every wait is Playwright's auto-waiting ``expect()`` on the live DOM: nothing sleeps, and nothing
reloads the page (a marker set on ``window`` at the start must survive to the end).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from chokaq.domain.models import EnqueueRequest, Lease
from chokaq.domain.states import FailureReason, Location
from chokaq.runtime.sweeper import run_sweep
from chokaq.storage.admin import Actor, AdminStore
from tests.deck.conftest import OPERATOR_TOKEN, VIEWER_TOKEN, DeckEnv, screenshot
from tests.helpers import age

pytestmark = pytest.mark.browser

MALFORMED = '{"to": "user@example.com", "body": "Hello, World!"}'  # no subject: the handler's model refuses it
FIXED = '{"to": "user@example.com", "subject": "Welcome!", "body": "Hello, World!"}'
MUTATING_NAMES = re.compile(r"resurrect|purge|cancel|save|pause|resume|^set$|force|reschedule|run now", re.I)


def _expect() -> Any:
    from playwright.sync_api import expect

    return expect


def row(page: Any, view: str, job_id: str) -> Any:
    return page.locator(f'[data-view="{view}"] [data-testid="row"][data-id="{job_id}"]')


def cancelled_jobs(deck: DeckEnv, n: int) -> list[str]:
    """``n`` DLQ jobs (reason Cancelled): delayed so no worker takes them first, then cancelled."""
    s = deck.app.storage
    ids = s.enqueue_many(
        [
            EnqueueRequest(
                type="noop_v1", payload=json.dumps({"n": i}), delay_seconds=3600, tags="bulk", created_by="test"
            )
            for i in range(n)
        ]
    )
    assert AdminStore(s).cancel(ids, Actor("test-setup", "admin")).affected == n
    return ids


def make_zombie(deck: DeckEnv) -> str:
    """A job a vanished worker left in Processing with a stale heartbeat, then one real sweep."""
    s = deck.app.storage
    job_id, _ = s.enqueue(EnqueueRequest(type="noop_v1", queue="reports", payload="{}", created_by="test"))
    (fetched,) = s.fetch("ghost-worker", 1, ["reports"])  # the test worker does not serve "reports"
    assert [j.id for j in s.start("ghost-worker", [fetched]).started] == [job_id]
    age(s, job_id, 3600)
    result = run_sweep(s, deck.app.settings, events=deck.app.bus)  # the Deck's console hears of it
    assert result.archived == 1
    return job_id


def test_operator_fixes_a_dead_job_and_purges_in_bulk(deck: DeckEnv, page: Any) -> None:
    expect = _expect()
    storage = deck.app.storage

    # 1. Open the Deck: "/" redirects to /deck/, live events come over SSE (dev_open, no token).
    page.goto(deck.url + "/")
    expect(page).to_have_url(re.compile(r"/deck/(#/overview)?$"))
    expect(page.get_by_test_id("who")).to_contain_text("admin")
    expect(page.get_by_test_id("live-status")).to_have_attribute("data-mode", "sse")
    page.evaluate("window.__deckNoReload = 'same page'")

    # The malformed-payload story: enqueued without "subject"; the worker dead-letters it (FatalError).
    bad_id, _ = storage.enqueue(
        EnqueueRequest(
            type="email_v1", queue="notifications", tags="welcome", created_by="signup-service", payload=MALFORMED
        )
    )
    expect(page.get_by_test_id("card-dlq-value")).to_have_text("1")  # the overview updates live
    expect(page.get_by_test_id("overview-errors")).to_contain_text("FatalError")
    expect(page.get_by_test_id("console")).to_contain_text(f"Job {bad_id} → DLQ: FatalError")
    screenshot(page, f"{deck.db}-overview")

    # 2. Find it in the DLQ and open the inspector.
    page.get_by_test_id("nav-dlq").click()
    bad_row = row(page, "dlq", bad_id)
    expect(bad_row).to_contain_text("FatalError")
    expect(page.get_by_test_id("hdr-dlq")).to_have_text("1")
    bad_row.get_by_test_id("open-job").click()
    insp = page.get_by_test_id("inspector")

    # 3. The error: the validation text in the full error details, plus the facts an operator needs.
    expect(insp.get_by_test_id("insp-error")).to_contain_text("subject: Field required")
    expect(insp.get_by_test_id("insp-reason")).to_have_text("FatalError")
    expect(insp.get_by_test_id("insp-type")).to_have_text("email_v1")
    expect(insp.get_by_test_id("insp-queue")).to_have_text("notifications")
    expect(insp.get_by_test_id("insp-attempts")).to_have_text("1")
    expect(insp.get_by_test_id("insp-worker")).to_have_text("deck-test-worker")
    expect(insp.get_by_test_id("insp-schema")).to_contain_text("subject")
    expect(insp.get_by_test_id("insp-tags")).to_have_value("welcome")

    # 4. Bad input never reaches storage: a JSON syntax error is caught in the browser...
    payload = insp.get_by_test_id("insp-payload")
    payload.fill('{"to": "user@example.com", "subject": ')
    expect(insp.get_by_test_id("insp-json-status")).to_contain_text("JSON syntax error")
    expect(insp.get_by_test_id("insp-save")).to_be_disabled()
    expect(insp.get_by_test_id("insp-resurrect")).to_be_disabled()
    # ...and a payload the handler's model refuses comes back from the API (422) as inline errors.
    payload.fill('{\n  "to": "not-an-address",\n  "subject": "",\n  "body": "Hello, World!"\n}')
    expect(insp.get_by_test_id("insp-json-status")).to_have_text("✓ valid JSON")
    insp.get_by_test_id("insp-save").click()
    errors = insp.get_by_test_id("insp-errors")
    expect(errors).to_contain_text("to: String should match pattern")
    expect(errors).to_contain_text("subject: String should have at least 1 character")
    expect(insp.get_by_test_id("insp-status")).to_contain_text("nothing was stored")
    stored = storage.get_job(bad_id)
    assert stored is not None and stored.location is Location.DLQ
    assert json.loads(stored.payload) == json.loads(MALFORMED)
    page.set_viewport_size({"width": 1280, "height": 1240})  # tall enough for the whole inspector story
    insp.evaluate("el => { el.scrollTop = 0; }")
    screenshot(page, f"{deck.db}-inspector")
    page.set_viewport_size({"width": 1280, "height": 860})

    # 5. Fix the payload and resurrect: the job leaves the DLQ and shows up in the archive, live.
    payload.fill(FIXED)
    resurrect = insp.get_by_test_id("insp-resurrect")
    expect(resurrect).to_have_text("Save & resurrect")
    resurrect.click()
    expect(bad_row).to_have_count(0)
    expect(page.get_by_test_id("hdr-dlq")).to_have_text("0")
    expect(insp.get_by_test_id("insp-location")).to_contain_text("archive")  # followed hot -> archive live
    expect(insp.get_by_test_id("insp-audit")).to_contain_text("dlq.resurrect")
    page.get_by_test_id("nav-archive").click()
    expect(row(page, "archive", bad_id)).to_contain_text("email_v1")
    done = storage.get_job(bad_id)
    assert done is not None and done.location is Location.ARCHIVE
    assert json.loads(done.payload)["subject"] == "Welcome!"
    insp.get_by_test_id("insp-close").click()
    expect(insp).to_be_hidden()

    # The console tells the zombie story, and the DLQ counter moves when the zombie lands.
    zombie_id = make_zombie(deck)
    expect(page.get_by_test_id("console")).to_contain_text("ZombieRescue: recovered 0 abandoned, archived 1 zombie")
    expect(page.get_by_test_id("hdr-dlq")).to_have_text("1")
    page.get_by_test_id("nav-dlq").click()
    zombie_row = row(page, "dlq", zombie_id)
    expect(zombie_row).to_contain_text("Zombie")
    zombie_row.get_by_test_id("open-job").click()
    expect(insp.get_by_test_id("insp-heartbeat")).to_contain_text("UTC")
    expect(insp.get_by_test_id("insp-z-silent")).to_contain_text("1h 0m (timeout 10m 0s, the default)")
    expect(insp.get_by_test_id("insp-z-worker")).to_have_text("ghost-worker")
    expect(insp.get_by_test_id("insp-z-idempotent")).to_contain_text("no: resurrecting may run it twice")
    expect(insp.get_by_test_id("insp-resurrect")).to_have_text("Resurrect")
    insp.get_by_test_id("insp-resurrect").click()  # as is: back to Pending (nobody serves "reports")
    expect(insp.get_by_test_id("insp-location")).to_contain_text("hot · Pending")
    expect(zombie_row).to_have_count(0)
    insp.get_by_test_id("insp-close").click()

    # 6. Bulk: 30 cancelled jobs. Resurrect two selected ones (under 25: a plain confirmation)...
    ids = cancelled_jobs(deck, 30)
    dlq = page.locator('[data-view="dlq"]')
    expect(dlq.get_by_test_id("list-total")).to_have_text("30 jobs")
    dlq.get_by_test_id("filter-failure_reason").select_option("Cancelled")
    dlq.get_by_test_id("filter-apply").click()
    expect(dlq.get_by_test_id("list-total")).to_have_text("30 jobs match the filter")
    for job_id in ids[:2]:
        row(page, "dlq", job_id).get_by_test_id("select-row").check()
    expect(dlq.get_by_test_id("selected-count")).to_have_text("2 jobs selected")
    page.locator("#main").evaluate("el => { el.scrollTop = 0; }")
    screenshot(page, f"{deck.db}-dlq")
    dlq.get_by_test_id("bulk-resurrect").click()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_contain_text("2 selected jobs still in the DLQ")
    expect(dialog.get_by_test_id("confirm-input")).to_have_count(0)
    dialog.get_by_test_id("confirm-ok").click()
    expect(dialog).to_have_count(0)
    expect(dlq.get_by_test_id("list-total")).to_have_text("28 jobs match the filter")

    # ...then purge everything matching the filter: preview count first, then the typed phrase.
    dlq.get_by_test_id("filter-purge").click()
    expect(dialog).to_contain_text("28 jobs match this filter")
    expect(dialog.get_by_test_id("confirm-phrase")).to_have_text("purge 28")
    ok = dialog.get_by_test_id("confirm-ok")
    expect(ok).to_be_disabled()
    dialog.get_by_test_id("confirm-input").fill("purge 2")
    expect(ok).to_be_disabled()
    dialog.get_by_test_id("confirm-input").fill("purge 28")
    expect(ok).to_be_enabled()
    ok.click()
    expect(dlq.get_by_test_id("list-total")).to_have_text("0 jobs match the filter")
    dlq.get_by_test_id("filter-reset").click()
    expect(dlq.get_by_test_id("list-total")).to_have_text("0 jobs")
    expect(page.get_by_test_id("hdr-dlq")).to_have_text("0")
    expect(page.get_by_test_id("console")).to_contain_text("28 jobs purged from dlq")
    assert all(storage.get_job(i) is None for i in ids[2:])

    # The audit view lists what was done, by whom.
    page.get_by_test_id("nav-audit").click()
    audit = page.get_by_test_id("audit-table")
    expect(audit).to_contain_text("dlq.purge")
    expect(audit).to_contain_text("dev (open)")

    assert page.evaluate("window.__deckNoReload") == "same page"


def test_roles_hide_what_they_cannot_use(deck: DeckEnv, page: Any) -> None:
    expect = _expect()
    storage = deck.app.storage
    dead = cancelled_jobs(deck, 1)[0]
    pending, _ = storage.enqueue(EnqueueRequest(type="noop_v1", payload="{}", delay_seconds=3600, created_by="t"))

    # 7. A viewer signs in with a token (no dev_open here) and gets the same page, read only.
    page.goto(deck.auth_url + "/deck/")
    form = page.get_by_test_id("signin-form")
    expect(form).to_be_visible()
    page.get_by_test_id("signin-token").fill("not-a-valid-token")
    page.get_by_test_id("signin-submit").click()
    expect(page.get_by_test_id("signin-error")).to_have_text("That token was refused.")
    page.get_by_test_id("signin-token").fill(VIEWER_TOKEN)
    page.get_by_test_id("signin-submit").click()
    expect(page.get_by_test_id("who")).to_have_text("vera · viewer")
    expect(page.get_by_test_id("live-status")).to_have_attribute("data-mode", "poll")  # no headers on EventSource

    def assert_read_only() -> None:
        assert page.locator("[data-mutating]").count() == 0
        names = [n.strip() for n in page.get_by_role("button").all_inner_texts()]
        assert not [n for n in names if MUTATING_NAMES.search(n)], names
        assert page.locator('main input[type="checkbox"], aside input[type="checkbox"]').count() == 0

    expect(page.get_by_test_id("card-dlq-value")).to_have_text("1")
    assert_read_only()
    page.get_by_test_id("nav-queues").click()
    expect(page.get_by_test_id("queues-table")).to_contain_text("default")
    assert_read_only()
    page.get_by_test_id("nav-hot").click()
    expect(row(page, "hot", pending)).to_be_visible()
    assert_read_only()
    page.get_by_test_id("nav-dlq").click()
    row(page, "dlq", dead).get_by_test_id("open-job").click()
    insp = page.get_by_test_id("inspector")
    expect(insp.get_by_test_id("insp-reason")).to_have_text("Cancelled")
    expect(insp.get_by_test_id("insp-payload")).to_have_attribute("readonly", "")
    expect(insp).to_contain_text("Read only: your role is viewer.")
    expect(page.locator("main")).not_to_contain_text("null")  # no stray placeholders where controls would be
    assert_read_only()
    screenshot(page, f"{deck.db}-viewer-inspector")

    # Polling keeps a token session live: a job dead-lettered elsewhere moves the counter.
    cancelled_jobs(deck, 1)
    expect(page.get_by_test_id("hdr-dlq")).to_have_text("2")
    expect(page.locator('[data-view="dlq"]').get_by_test_id("list-total")).to_have_text("2 jobs")

    # An operator may resurrect and cancel, but purge and force stay admin-only.
    page.get_by_test_id("signout").click()
    page.get_by_test_id("signin-token").fill(OPERATOR_TOKEN)
    page.get_by_test_id("signin-submit").click()
    expect(page.get_by_test_id("who")).to_have_text("otto · operator")
    page.get_by_test_id("nav-dlq").click()
    dlq = page.locator('[data-view="dlq"]')
    expect(dlq.get_by_test_id("bulk-resurrect")).to_be_visible()
    expect(dlq.get_by_test_id("filter-resurrect")).to_be_visible()
    assert dlq.get_by_test_id("bulk-purge").count() == 0 and dlq.get_by_test_id("filter-purge").count() == 0
    row(page, "dlq", dead).get_by_test_id("open-job").click()
    expect(insp.get_by_test_id("insp-resurrect")).to_be_visible()
    assert insp.get_by_test_id("insp-purge").count() == 0 and insp.get_by_test_id("insp-force").count() == 0


def test_a_bulk_purge_refused_when_the_set_grew_after_the_preview(deck: DeckEnv, page: Any) -> None:
    expect = _expect()
    storage = deck.app.storage
    first = cancelled_jobs(deck, 3)
    response = page.goto(deck.url + "/deck/")
    # The Deck is served under the strict policy the page fixture watches for violations.
    headers = response.all_headers()
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    page.get_by_test_id("nav-dlq").click()
    dlq = page.locator('[data-view="dlq"]')
    dlq.get_by_test_id("filter-failure_reason").select_option("Cancelled")
    dlq.get_by_test_id("filter-apply").click()
    expect(dlq.get_by_test_id("list-total")).to_have_text("3 jobs match the filter")

    dlq.get_by_test_id("filter-purge").click()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_contain_text("3 jobs match this filter")
    expect(dialog.get_by_test_id("confirm-phrase")).to_have_text("purge 3")
    late = cancelled_jobs(deck, 40)  # more jobs fail while the operator reads "Purge 3 jobs?"
    dialog.get_by_test_id("confirm-input").fill("purge 3")
    dialog.get_by_test_id("confirm-ok").click()
    expect(page.get_by_test_id("flash")).to_contain_text("Purge refused")
    expect(page.get_by_test_id("flash")).to_contain_text("the 3 you confirmed")
    expect(dlq.get_by_test_id("list-total")).to_have_text("43 jobs match the filter")
    assert all(storage.get_job(i) is not None for i in [*first, *late])


def test_a_stored_bad_payload_shows_flagged_and_stays_purgeable(deck: DeckEnv, page: Any) -> None:
    from sqlalchemy import update

    from chokaq.storage.schema import jobs_dlq

    expect = _expect()
    storage = deck.app.storage
    (job,) = cancelled_jobs(deck, 1)
    with storage.engine.begin() as c:  # what an older version or a hand-written UPDATE could leave
        c.execute(update(jobs_dlq).where(jobs_dlq.c.Id == job).values(Payload='{"x": "\\udfff", "n": NaN}'))
    page.goto(deck.url + "/deck/#/dlq")
    row(page, "dlq", job).get_by_test_id("open-job").click()
    insp = page.get_by_test_id("inspector")
    expect(insp.get_by_test_id("insp-payload-invalid")).to_contain_text("not valid")
    insp.get_by_test_id("insp-purge").click()
    dialog = page.get_by_test_id("confirm-dialog")
    dialog.get_by_test_id("confirm-input").fill("purge 1")
    dialog.get_by_test_id("confirm-ok").click()
    expect(row(page, "dlq", job)).to_have_count(0)
    assert storage.get_job(job) is None


def test_the_inspector_lists_every_attempt_and_shows_hostile_error_text_as_text(deck: DeckEnv, page: Any) -> None:
    """A job retried once, then lost with its worker: the inspector's attempt table has both, the
    first with its traceback, and an error message written as markup stays text."""
    from datetime import UTC, datetime

    from chokaq.domain.attempts import ErrorParts, appended, failed_attempt

    expect = _expect()
    s = deck.app.storage
    job_id, _ = s.enqueue(EnqueueRequest(type="noop_v1", queue="reports", payload="{}", created_by="test"))
    (fetched,) = s.fetch("ghost-worker", 1, ["reports"])
    s.start("ghost-worker", [fetched])
    hostile = '<img src=x onerror="window.__pwned=1">'
    entry = failed_attempt(
        attempt=1,
        outcome="retried",
        worker="ghost-worker",
        ended=datetime.now(UTC),
        duration_ms=12,
        reason=None,
        error=ErrorParts("UpstreamTimeout", hostile, "Traceback (most recent call last):\n  File x\nUpstreamTimeout"),
    )
    assert s.retry(Lease(job_id, "ghost-worker", 1), 0, appended(None, entry))
    (again,) = s.fetch("ghost-worker", 1, ["reports"])
    s.start("ghost-worker", [again])
    age(s, job_id, 3600)
    assert run_sweep(s, deck.app.settings, events=deck.app.bus).archived == 1

    page.goto(deck.url + "/deck/#/dlq")
    row(page, "dlq", job_id).get_by_test_id("open-job").click()
    history = page.get_by_test_id("inspector").get_by_test_id("insp-attempt-history")
    rows = history.get_by_test_id("insp-attempt")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("retried")
    expect(rows.nth(0)).to_contain_text(f"UpstreamTimeout: {hostile}")
    expect(rows.nth(1)).to_contain_text("worker lost (Zombie)")
    expect(rows.nth(1)).to_contain_text("ghost-worker")
    rows.nth(0).get_by_text("Traceback", exact=True).click()
    expect(rows.nth(0).locator("pre")).to_contain_text("Traceback (most recent call last)")
    assert page.evaluate("window.__pwned") is None
    assert history.locator("img").count() == 0
    screenshot(page, f"{deck.db}-attempts")


def test_an_operator_cancels_a_running_job_from_the_inspector(deck: DeckEnv, page: Any) -> None:
    expect = _expect()
    s = deck.app.storage
    job_id, _ = s.enqueue(EnqueueRequest(type="noop_v1", queue="reports", payload="{}", created_by="test"))
    (fetched,) = s.fetch("ghost-worker", 1, ["reports"])  # the test worker does not serve "reports"
    (running,) = s.start("ghost-worker", [fetched]).started

    page.goto(deck.auth_url + "/deck/")
    page.get_by_test_id("signin-token").fill(OPERATOR_TOKEN)
    page.get_by_test_id("signin-submit").click()
    expect(page.get_by_test_id("who")).to_have_text("otto · operator")
    page.get_by_test_id("nav-hot").click()
    row(page, "hot", job_id).get_by_test_id("open-job").click()
    insp = page.get_by_test_id("inspector")
    expect(insp.get_by_test_id("insp-worker")).to_have_text("ghost-worker")
    assert insp.get_by_test_id("insp-cancel").count() == 0  # the Pending job's cancel is not offered
    insp.get_by_test_id("insp-cancel-running").click()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_contain_text("is Processing on worker ghost-worker")
    # Dismissed: nothing happens.
    dialog.get_by_test_id("confirm-cancel").click()
    assert s.get_job(job_id).location is Location.HOT  # type: ignore[union-attr]
    insp.get_by_test_id("insp-cancel-running").click()
    page.get_by_test_id("confirm-reason").fill("stuck on a dead host")
    page.get_by_test_id("confirm-ok").click()
    expect(insp.get_by_test_id("insp-status")).to_contain_text("Cancelled: the job is in the DLQ now")
    expect(insp.get_by_test_id("insp-reason")).to_have_text("Cancelled")
    expect(insp.get_by_test_id("insp-error")).to_contain_text("Cancelled by otto: stuck on a dead host")
    expect(insp.get_by_test_id("insp-error")).to_contain_text("It was Processing on worker ghost-worker")
    dead = s.get_job(job_id)
    assert dead is not None and dead.location is Location.DLQ
    # Its worker's late success is refused.
    from chokaq.storage import Completion

    assert s.complete("ghost-worker", [Completion(running.lease, 1)]) == set()
    (audit,) = [a for a in AdminStore(s).list_audit(job_id=job_id)[0] if a["action"] == "job.cancel"]
    assert audit["actor"] == "otto" and audit["details"]["was_running"][0]["worker"] == "ghost-worker"
    screenshot(page, f"{deck.db}-cancel-running")

    # In bulk: a selection in Hot jobs, a running job and a Pending one.
    page.keyboard.press("Escape")
    held, _ = s.enqueue(EnqueueRequest(type="noop_v1", queue="reports", payload="{}", created_by="test"))
    assert [j.id for j in s.start("ghost-worker", s.fetch("ghost-worker", 1, ["reports"])).started] == [held]
    waiting, _ = s.enqueue(EnqueueRequest(type="noop_v1", payload="{}", delay_seconds=3600, created_by="test"))
    page.get_by_test_id("nav-hot").click()
    hot = page.locator('[data-view="hot"]')
    for job in (held, waiting):
        row(page, "hot", job).get_by_test_id("select-row").check()
    expect(hot.get_by_test_id("selected-count")).to_have_text("2 jobs selected")
    hot.get_by_test_id("bulk-cancel-running").click()
    expect(page.get_by_test_id("confirm-dialog")).to_contain_text("told to stop")
    page.get_by_test_id("confirm-ok").click()
    expect(page.get_by_test_id("flash")).to_contain_text("2 jobs cancelled (1 running: told to stop)")
    assert {s.get_job(j).failure_reason for j in (held, waiting)} == {FailureReason.CANCELLED}  # type: ignore[union-attr]
