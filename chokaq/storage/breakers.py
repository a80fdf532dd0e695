"""Circuit breakers in the database (CircuitBreakers, migration 8): one row per job type, read by
every worker's claim, so all workers agree on a type's state.

Each change is one transaction that locks the type's row, reads the database's clock with it,
applies a transition of :mod:`chokaq.domain.breakers` and writes the row back. Only workers with
Execution.CircuitBreaker on (or a handler's own breaker) call any of this; and they call it on a
failed attempt, a probe's success, the probe claim of a type whose breaker is not closed, and the
sweep, never for an ordinary success.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select
from sqlalchemy.exc import IntegrityError

from chokaq.domain import breakers as b
from chokaq.domain.errors import NotFoundError
from chokaq.domain.keys import check_key
from chokaq.domain.models import JobRecord
from chokaq.domain.states import FailureReason
from chokaq.storage import event_feed
from chokaq.storage.admin_types import Actor
from chokaq.storage.dialects import profile_of
from chokaq.storage.moving import run_move
from chokaq.storage.records import hot_record
from chokaq.storage.sqlfuncs import utcnow
from chokaq.storage.statements import breakers as sb

if TYPE_CHECKING:
    from chokaq.storage.store import Storage


def _state(row: Any) -> b.BreakerState:
    m = row._mapping
    return b.BreakerState(
        job_type=m["JobType"],
        state=int(m["State"]),
        failure_count=int(m["FailureCount"]),
        window_start_utc=m["WindowStartUtc"],
        opened_at_utc=m["OpenedAtUtc"],
        open_until_utc=m["OpenUntilUtc"],
        probes_in_flight=int(m["ProbesInFlight"]),
        updated_by=m["UpdatedBy"],
        last_updated_utc=m["LastUpdatedUtc"],
    )


def _locked(c: Connection, job_type: str, *, create: bool) -> tuple[b.BreakerState | None, datetime]:
    """The type's row under lock and the database's now; with ``create``, a closed row made first
    when there is none (another transaction making it at the same moment is fine)."""
    params = {"breaker_type": job_type}
    row = c.execute(sb.locked_row_statement(), params).first()
    if row is None and create:
        try:
            with c.begin_nested():
                c.execute(sb.insert_row_statement(), params)
        except IntegrityError:
            pass  # made by another worker's first failure: read theirs
        row = c.execute(sb.locked_row_statement(), params).first()
    if row is None:
        return None, _naive(c.execute(select(utcnow())).scalar_one())
    return _state(row), _naive(row._mapping["Now"])


def _naive(value: Any) -> datetime:
    if isinstance(value, str):  # SQLite's text clock, where the driver does not parse it
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return value.replace(tzinfo=None)


def _announced(c: Connection, change: b.BreakerChange | None) -> b.BreakerChange | None:
    """A change of state, in the event feed of its transaction (every process's Deck hears it);
    nothing when the state stayed."""
    if change is not None:
        data = {"type": change.job_type, "old": change.old, "new": change.new, "by": change.by}
        event_feed.record(c, "breaker.changed", data)
    return change


def _write(c: Connection, new: b.BreakerState) -> None:
    values = {
        "b_State": new.state,
        "b_FailureCount": new.failure_count,
        "b_WindowStartUtc": new.window_start_utc,
        "b_OpenedAtUtc": new.opened_at_utc,
        "b_OpenUntilUtc": new.open_until_utc,
        "b_ProbesInFlight": new.probes_in_flight,
        "b_UpdatedBy": new.updated_by,
        "b_LastUpdatedUtc": new.last_updated_utc,
    }
    nulls = frozenset(k[2:] for k, v in values.items() if v is None)
    params = {k: v for k, v in values.items() if v is not None}
    c.execute(sb.write_row_statement(nulls), {"breaker_type": new.job_type, **params})


class BreakerStore:
    """The CircuitBreakers table of one :class:`Storage`."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    # ------------------------------------------------------------------ the worker's side
    def record_failure(self, job_type: str, policy: b.BreakerPolicy, by: str) -> b.BreakerChange | None:
        """A failed attempt of ``job_type`` (already recorded by the retry or fail move)."""

        def work(c: Connection) -> b.BreakerChange | None:
            old, now = _locked(c, job_type, create=True)
            assert old is not None
            new = b.on_failure(old, policy, now, by)
            _write(c, new)
            return _announced(c, b.change_of(old, new, by))

        return self.storage.write(work, op="breaker_failure")

    def record_probe_success(self, job_type: str, by: str) -> b.BreakerChange | None:
        """A probe of a half-open breaker succeeded: closed. Nothing if it is not half-open now
        (an operator closed it, or another probe's failure opened it again)."""

        def work(c: Connection) -> b.BreakerChange | None:
            old, now = _locked(c, job_type, create=False)
            if old is None or old.state != b.HALF_OPEN:
                return None
            new = b.closed(old, now, by)
            _write(c, new)
            return _announced(c, b.change_of(old, new, by))

        return self.storage.write(work, op="breaker_probe_success")

    def not_closed(self) -> list[b.BreakerState]:
        """Open and half-open breakers: where a worker may have probes to claim."""
        return self.storage.read(lambda c: [_state(r) for r in c.execute(sb.not_closed_statement())], op="breakers")

    def claim_probes(
        self, worker_id: str, job_type: str, policy: b.BreakerPolicy, queue_names: Sequence[str] | None
    ) -> tuple[list[JobRecord], b.BreakerChange | None]:
        """An open breaker past OpenDuration turns half-open, and a half-open one lets its free
        probes through: up to that many due jobs of the type, Pending -> Fetched for
        ``worker_id``, in the transaction that holds the breaker's row (so probes from several
        workers never exceed HalfOpenProbes)."""

        def work(c: Connection) -> tuple[list[JobRecord], b.BreakerChange | None]:
            old, now = _locked(c, job_type, create=False)
            if old is None:
                return [], None
            new, room = b.admit_probes(old, policy, now, worker_id)
            jobs: list[JobRecord] = []
            if room:
                params: dict[str, Any] = {"breaker_type": job_type}
                if queue_names:
                    params["probe_queues"] = list(queue_names)
                profile = profile_of(c.dialect)
                ids = [r[0] for r in c.execute(profile.probe_ids_statement(room, bool(queue_names)), params)]
                if ids:
                    claimed = c.execute(profile.probe_claim_statement(), {"probe_ids": ids, "claim_worker": worker_id})
                    jobs = [hot_record(r) for r in claimed]
                    new = replace(new, probes_in_flight=new.probes_in_flight + len(jobs), last_updated_utc=now)
            if new != old:
                _write(c, new)
            return jobs, _announced(c, b.change_of(old, new, worker_id))

        return self.storage.write(work, op="breaker_probes")

    # ------------------------------------------------------------------ operators
    def every(self) -> list[b.BreakerState]:
        return self.storage.read(lambda c: [_state(r) for r in c.execute(sb.rows_statement())], op="breakers")

    def close(self, job_type: str, actor: Actor) -> tuple[b.BreakerState, b.BreakerChange | None]:
        """Close ``job_type``'s breaker now (operator; audited with the state it had). Closing a
        closed breaker changes nothing and writes no audit row."""
        check_key("type", job_type)
        from chokaq.storage.admin import AdminStore

        def work(c: Connection) -> tuple[b.BreakerState, b.BreakerChange | None]:
            old, now = _locked(c, job_type, create=False)
            if old is None:
                raise NotFoundError(f"no circuit breaker for job type {job_type!r}")
            if old.state == b.CLOSED:
                return old, None
            new = b.closed(old, now, actor.name)
            _write(c, new)
            details = {"job_type": job_type, "was": old.state_name, "failure_count": old.failure_count}
            AdminStore.audit(c, actor, "breaker.close", [], details)
            return new, b.change_of(old, new, actor.name)

        return self.storage.write(work, op="breaker_close")

    # ------------------------------------------------------------------ the sweep
    def expire_waiting(self, max_job_age: float, size: int) -> list[str]:
        """Pending jobs older than Retry.MaxJobAge whose type's breaker is not closed -> JobsDLQ as
        CircuitBreakerOpen, ``size`` per transaction (ids, then one move and FailedTotal), at most
        as many as one statement may lock on this database (Profile.statement_rows)."""
        size = self.storage.tx.profile.statement_rows(size)
        ids_stmt = sb.expired_ids_statement(max_job_age, size)
        move = sb.expired_move_statements(max_job_age)

        def batch(c: Connection) -> list[str]:
            ids = [r[0] for r in c.execute(ids_stmt)]
            if not ids:
                return []
            expired = [job_id for job_id, _ in run_move(c, move, {"breaker_ids": ids})]
            if expired:
                data = {"reason": FailureReason.CIRCUIT_BREAKER_OPEN.label, "count": len(expired)}
                event_feed.record(c, "dlq.batch", {**data, "ids": expired[: event_feed.MAX_EVENT_IDS]})
            return expired

        moved: list[str] = []
        while True:
            got = self.storage.write(batch, op="sweep_breakers")
            moved += got
            if len(got) < size:
                return moved
