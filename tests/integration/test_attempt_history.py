"""Every attempt on the record: a failed attempt's entry travels with its job to the archive and the
DLQ, a resurrect adds its own, and hostile error text is stored and read back safely."""

from __future__ import annotations

import json
from typing import Any

from chokaq import JobContext
from chokaq.domain.attempts import MAX_ENTRIES, MAX_MESSAGE_CHARS, MAX_TRACEBACK_CHARS, Attempt, appended
from chokaq.domain.states import Location
from chokaq.operations.job_out import JobOut
from chokaq.storage import Actor, AdminStore, JobFilter
from tests.helpers import wait_for
from tests.integration.test_worker import make_app


class UpstreamTimeout(Exception):
    pass


def _attempts(app: Any, job_id: str) -> tuple[Any, list[dict[str, Any]]]:
    rec = app.storage.get_job(job_id)
    assert rec is not None
    out = JobOut.from_record(rec).model_dump()
    return rec, out["attempts"]


def test_two_failures_then_a_success_leave_two_entries_in_the_archive(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url, retry={"max_attempts": 5})
    runs: list[int] = []

    @app.job("flaky_v1")
    async def flaky(payload: dict[str, Any], ctx: JobContext) -> None:
        runs.append(ctx.attempt)
        if len(runs) <= 2:
            raise UpstreamTimeout(f"upstream timed out (run {len(runs)})")

    job_id = app.enqueue("flaky_v1", {})
    run_worker(app)
    wait_for(lambda: (r := app.storage.get_job(job_id)) is not None and r.location is Location.ARCHIVE)
    rec, attempts = _attempts(app, job_id)
    assert rec.attempt_count == 3
    assert [(a["attempt"], a["outcome"], a["error_type"]) for a in attempts] == [
        (1, "retried", "UpstreamTimeout"),
        (2, "retried", "UpstreamTimeout"),
    ]
    assert [a["message"] for a in attempts] == ["upstream timed out (run 1)", "upstream timed out (run 2)"]
    for a in attempts:
        assert "Traceback (most recent call last)" in a["traceback"] and "in flaky" in a["traceback"]
        assert a["worker"] == rec.worker_id and a["duration_ms"] is not None and a["started_utc"] <= a["ended_utc"]
    # Only a job's own read carries the history: a list page does not load it.
    page = AdminStore(app.storage).list_jobs(Location.ARCHIVE, JobFilter(min_attempts=2))
    assert [j.id for j in page.items] == [job_id] and JobOut.from_record(page.items[0], history=False).attempts is None
    assert AdminStore(app.storage).list_jobs(Location.ARCHIVE, JobFilter(min_attempts=4)).total == 0


def test_three_failures_reach_the_dlq_with_three_entries_and_a_resurrect_keeps_them(
    db_url: str, run_worker: Any
) -> None:
    app = make_app(db_url)  # MaxAttempts 3

    @app.job("always_fails")
    async def always(payload: dict[str, Any], ctx: JobContext) -> None:
        raise UpstreamTimeout(f"attempt {ctx.attempt} refused")

    job_id = app.enqueue("always_fails", {})
    w = run_worker(app)
    wait_for(lambda: (r := app.storage.get_job(job_id)) is not None and r.location is Location.DLQ)
    w.stop()
    _, attempts = _attempts(app, job_id)
    assert [(a["attempt"], a["outcome"]) for a in attempts] == [
        (1, "retried"),
        (2, "retried"),
        (3, "dead-lettered"),
    ]
    assert attempts[2]["reason"] == "MaxRetriesExceeded" and attempts[2]["message"] == "attempt 3 refused"

    AdminStore(app.storage).resurrect(job_id, Actor("ops@example.com", "operator"))
    rec, attempts = _attempts(app, job_id)
    assert rec.location is Location.HOT and rec.attempt_count == 0
    assert [a["outcome"] for a in attempts] == ["retried", "retried", "dead-lettered", "resurrected"]
    assert attempts[-1]["by"] == "ops@example.com"


def test_hostile_error_text_is_stored_bounded_redacted_and_readable(db_url: str, run_worker: Any) -> None:
    app = make_app(db_url, retry={"max_attempts": 2})
    hostile = "bad \x00\x07\x1b[31m \ud800 lone, see https://user:hunter2@db.internal/x?token=abc " + "x" * 10_000_000

    @app.job("hostile")
    async def hostile_job(payload: dict[str, Any], ctx: JobContext) -> None:
        raise ValueError(hostile)

    job_id = app.enqueue("hostile", {})
    run_worker(app)
    wait_for(lambda: (r := app.storage.get_job(job_id)) is not None and r.location is Location.DLQ, timeout=60)
    rec, attempts = _attempts(app, job_id)
    assert rec.attempts is not None and len(rec.attempts) < 2 * (MAX_MESSAGE_CHARS + MAX_TRACEBACK_CHARS) + 4096
    assert rec.attempts.isascii()  # control characters and the lone surrogate travel escaped
    first = attempts[0]
    # NUL and the lone surrogate are stored as escapes (PostgreSQL refuses NUL, no driver encodes a
    # lone surrogate); other control characters are kept, JSON-escaped.
    assert first["message"].startswith("bad \\x00\x07\x1b[31m \\ud800 lone")
    assert rec.error_details.startswith("ValueError: bad \\x00\x07\x1b[31m \\ud800 lone")
    assert "hunter2" not in rec.error_details and len(rec.error_details) < 70_000
    assert "hunter2" not in rec.attempts and "token=abc" not in rec.attempts
    assert "characters cut" in first["message"] and len(first["message"]) < MAX_MESSAGE_CHARS + 100
    json.dumps(JobOut.from_record(rec).model_dump())  # what the API and the CLI print


def test_the_history_keeps_the_first_and_the_latest_entries() -> None:
    stored = None
    for n in range(1, 31):
        stored = appended(stored, Attempt(attempt=n, outcome="retried", ended_utc=f"t{n}"))
    entries = json.loads(stored or "[]")
    assert len(entries) == MAX_ENTRIES
    assert entries[0]["attempt"] == 1 and entries[0]["dropped_after"] == 10
    assert [e["attempt"] for e in entries[1:]] == list(range(12, 31))


def test_a_dead_jobs_last_attempt_after_a_resurrect_is_not_taken_for_an_earlier_one() -> None:
    from datetime import UTC, datetime

    from chokaq.domain.attempts import final_failure, resurrected

    before = appended(
        None,
        Attempt(attempt=1, outcome="retried", ended_utc="t1"),
        Attempt(attempt=2, outcome="dead-lettered", ended_utc="t2"),
        resurrected("ops", datetime.now(UTC)),
    )
    # Attempt 1 after the resurrect died with its worker: it is not the attempt 1 from before.
    final = final_failure(
        before, attempt=1, reason="Zombie", worker="w", started=None, failed_at=datetime.now(UTC), details="lost"
    )
    assert final is not None and final.outcome == "worker lost"


def test_the_stored_history_stays_small_however_long_the_tracebacks() -> None:
    from chokaq.domain.attempts import MAX_HISTORY_CHARS

    stored = None
    for n in range(1, 31):
        stored = appended(stored, Attempt(attempt=n, outcome="retried", ended_utc="t", traceback="é" * 7_000))
    assert stored is not None and len(stored) <= MAX_HISTORY_CHARS
    entries = json.loads(stored)
    assert "traceback" in entries[-1] and len(entries) == MAX_ENTRIES  # the latest keeps its traceback
