"""The worker's hot-path statements, the sweep's and retention's, as text a DBA can review without Python.

``chokaq db script --dialect D --queries`` prints them; ``make scripts`` writes them to
sql/<dialect>/queries.sql, and a test keeps those files current, so a change to a statement's
shape (and so to its plan) shows up as a diff.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement

from chokaq.settings import EventsSettings, ExecutionSettings, RecoverySettings, RetrySettings, StorageSettings
from chokaq.storage import statements as st
from chokaq.storage.dialects import PROFILES, Profile
from chokaq.storage.schema import jobs_dlq
from chokaq.storage.statements import breakers as sb
from chokaq.storage.statements import feed as sf
from chokaq.storage.statements import schedules as sch
from chokaq.storage.statements import steps as stp
from chokaq.storage.statements import workers as wk

# Shown as a parameter: the run's clock minus Retention.DlqDays.
RETENTION_CUTOFF = datetime(2000, 1, 1)


def _profile(name: str) -> Profile:
    profile = PROFILES.get(name)
    if profile is None or not profile.queries_script:
        raise ValueError(f"no queries script for {name!r}: use postgresql or mssql")
    return profile


def statements(dialect_name: str) -> list[tuple[str, str, ClauseElement]]:
    """``(name, what it does, statement)`` in the order a job meets them."""
    batch = ExecutionSettings().fetch_batch_size
    profile = _profile(dialect_name)
    groups = 0 if profile.lease_rowset else 1
    recovery = RecoverySettings()
    cleanup = StorageSettings().cleanup_batch_size
    sweep = st.sweep_statements(
        recovery.fetched_job_timeout,
        recovery.processing_zombie_timeout,
        RetrySettings().max_attempts,
        StorageSettings().cleanup_batch_size,
    )

    def claim(by_queue: bool, start: bool = False, breaker: bool = False) -> ClauseElement:
        queues = ["a", "b"] if by_queue else []
        stmt: ClauseElement = profile.claim_statement(queues, False, batch, start, start, {}, breaker)
        return stmt

    def move(m: st.MoveStatements) -> ClauseElement:
        stmt: ClauseElement = profile.alone_move(m)
        return stmt

    return [
        ("claim", f"Pending -> Fetched: up to {batch} due jobs of every queue, in claim order", claim(False)),
        ("claim_queues", "the same for a worker serving some queues (--queues a,b)", claim(True)),
        (
            "claim_and_start",
            "Pending -> Processing at once, for a worker with idle slots",
            claim(False, True),
        ),
        ("start", "Fetched -> Processing for the worker's own leases (fenced by worker and attempt)",
         st.start_statement(groups, True)),
        ("heartbeat", "stamps HeartbeatUtc on the worker's running jobs (fenced)",
         st.heartbeat_statement(groups)),
        ("heartbeat_logs", "the same tick when handlers logged: each job's new logs and progress by its id "
         "(the same one statement; jobs without new lines keep theirs)", st.heartbeat_statement(groups, True, True)),
        ("complete", "Processing -> JobsArchive, and SucceededTotal, in one round trip (fenced)",
         move(st.complete_statements(groups))),
        ("complete_logs", "the same, with the logs and progress the last heartbeat did not write, by job id",
         move(st.complete_statements(groups, True, True))),
        ("fail", "Processing -> JobsDLQ with its attempt history, its last logs and progress, and FailedTotal, "
         "in one round trip (fenced)", move(st.fail_statements(groups, True, True, True, True))),
        ("retry", "Processing -> Pending, due after the retry delay, with its attempt history, its last logs "
         "and progress (fenced); then counter_bump", st.retry_statement(groups, True, True, True)),
        ("counter_bump", "adds to one StatsSummary counter of a queue: always after the job rows",
         st.bump_statement(st.RETRIED)),
        ("release", "Fetched -> Pending for leases a stopping worker will not start (fenced)",
         st.release_statement(groups)),
        ("sweep_recover", "sweep: Fetched past Recovery.FetchedJobTimeout -> Pending, one batch", sweep.recover),
        ("sweep_retry_ids", "sweep: the ids (and workers) of expired ZombieRetry jobs, one batch", sweep.retry_ids),
        ("sweep_retry", "sweep: those jobs -> Pending, checked again (then audited per worker)", sweep.retry),
        ("sweep_zombie_ids", "sweep: the ids of expired jobs bound for the DLQ, one batch", sweep.zombie_ids),
        ("sweep_zombies", "sweep: those jobs -> JobsDLQ inside the database, and FailedTotal", move(sweep.zombies)),
        ("worker_presence", "the worker's row in Workers, live, each heartbeat tick (insert or update, one statement)",
         wk.presence_statement(profile.name, False)),
        ("worker_stopped", "the worker's row marked stopped at a clean exit", wk.stopped_statement()),
        ("sweep_workers_lost", "sweep: live workers silent past Recovery.ProcessingZombieTimeout -> lost",
         wk.lost_statement(recovery.processing_zombie_timeout)),
        ("sweep_workers_prune", f"sweep: stopped or lost workers past Recovery.WorkerRetention deleted, {cleanup} "
         "per transaction", wk.prune_statement(recovery.worker_retention, cleanup)),
        ("schedules_due", "schedules: the names of the rows due now (every Schedules.PollInterval, no lock)",
         sch.due_names_statement()),
        ("schedule_lock", "schedules: one due row locked for its firing, skipped when another process holds it",
         sch.lock_due_statement()),
        ("schedule_advance", "schedules: the row moved to its next slot, after the slot's job was enqueued "
         "(with its idempotency key) in the same transaction", sch.advance_statement(True)),
        ("cancelled_runs", "which jobs a worker's heartbeat lost an operator cancelled (cancel_reason: cancelled)",
         st.cancelled_runs_statement()),
        ("stopped_note", "a cancelled run's DLQ row gets when its handler finally stopped",
         st.stopped_note_statement()),
        # Execution.CircuitBreaker (off by default: then none of these is sent, and the claims above
        # are the ones sent).
        ("claim_breakers", "the claim of a worker with circuit breakers on: types whose breaker is not closed "
         "are left out", claim(False, True, True)),
        ("breaker_row", "a failed attempt, a probe's success or a probe claim: the type's breaker row, locked, "
         "with the database's clock", sb.locked_row_statement()),
        ("breaker_insert", "the type's first counted failure: its closed row", sb.insert_row_statement()),
        ("breaker_write", "the row's new state, in the same transaction", sb.write_row_statement()),
        ("breakers_not_closed", "a worker's look for types to probe, at most every Storage.PollingInterval",
         sb.not_closed_statement()),
        ("breaker_probe_ids", "half-open: the probes' ids, under the breaker row's lock",
         profile.probe_ids_statement(ExecutionSettings().circuit_breaker.half_open_probes, False)),
        ("breaker_probe_claim", "those jobs Pending -> Fetched for the probing worker",
         profile.probe_claim_statement()),
        ("sweep_breaker_ids", "sweep: Pending jobs past Retry.MaxJobAge whose type's breaker is not closed, "
         "one batch", sb.expired_ids_statement(RetrySettings().max_job_age, cleanup)),
        ("sweep_breaker_move", "those jobs -> JobsDLQ as CircuitBreakerOpen, and FailedTotal",
         move(sb.expired_move_statements(RetrySettings().max_job_age))),
        ("step_start", "ctx.step: a step's start, written only while the worker holds the job at its attempt "
         "(its JobsHot row locked for the statement)", stp.step_start_statement()),
        ("step_restart", "ctx.step: a start never confirmed (or failed) in an earlier attempt, started again (fenced)",
         stp.step_restart_statement()),
        ("step_done", "ctx.step: the step's end, done with its result or failed (fenced)",
         stp.step_done_statement(False)),
        ("step_mark_done", "ctx.step: a start of an earlier attempt the handler found done (mark_done; fenced)",
         stp.step_done_statement(True)),
        ("steps_load", "ctx.step: the job's journal, read once per run at its first step", stp.steps_of_statement()),
        ("retention_dlq_steps", "Retention.DlqDays: the step journals of the batch below, first, in its transaction",
         stp.purge_older_steps_statement(jobs_dlq, jobs_dlq.c.FailedAtUtc, RETENTION_CUTOFF, cleanup)),
        ("retention_dlq", f"Retention.DlqDays: the oldest dead jobs past the cutoff deleted, {cleanup} per transaction",
         st.purge_older_statement(jobs_dlq, jobs_dlq.c.FailedAtUtc, RETENTION_CUTOFF, cleanup)),
        # The event feed (docs/live-events.md): never sent for a successful job.
        ("feed_insert", "event feed: one row in the transaction of what it describes (a sweep's rescue, a batch "
         "of dead-letters of one reason, an audited action)", sf.feed_insert_statement()),
        ("feed_after", "event feed: a follower's read after its cursor (a range on the primary key), "
         "every Admin.EventPollInterval and at each NOTIFY", sf.feed_after_statement(500)),
        ("feed_purge_age", f"sweep: event feed rows past Events.Retention deleted, {cleanup} per transaction",
         sf.feed_purge_age_statement(EventsSettings().retention, cleanup)),
        ("feed_purge_count", f"sweep: event feed rows beyond the newest Events.MaxRows deleted, {cleanup} per "
         "transaction", sf.feed_purge_count_statement(cleanup)),
    ]  # fmt: skip


def render_queries(dialect_name: str) -> str:
    profile = _profile(dialect_name)
    dialect = profile.scripting_dialect()
    end = profile.script_separator
    out = [
        f"-- chokaq's hot-path and sweep statements for {dialect_name}, as chokaq sends them. Generated by\n"
        "-- `chokaq db script --queries` (make scripts); do not edit by hand. Parameters are shown named\n"
        "-- (:name); the drivers bind them positionally. Batch sizes and timeouts are the defaults.\n"
    ]
    for name, what, stmt in statements(dialect_name):
        compiled = stmt.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)  # a statement's compiler (DDL's has no binds)
        values = {k: b.value for k, b in compiled.binds.items()}

        def post(m: re.Match[str], values: dict[str, Any] = values) -> str:
            # Limits (TOP n, LIMIT n) are literals at run time; a list (IN a bound list) stays a parameter.
            value = values.get(m.group(1))
            return str(value) if isinstance(value, int) else f":{m.group(1)}"

        sql = re.sub(r"__\[POSTCOMPILE_(\w+)\]", post, str(compiled)).strip()
        sql = "\n".join(line.rstrip() for line in sql.splitlines())
        out.append(f"\n-- name: {name}\n-- {what}\n{sql}{end}")
    return "".join(out)
