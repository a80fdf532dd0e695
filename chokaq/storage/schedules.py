"""Recurring jobs in the database: the code's schedules upserted, due rows fired exactly once per
slot, and the operator's pause, resume, run-now and cron edit (each audited with its change).

Exactly once, with no leader: any number of processes may call :meth:`ScheduleStore.fire_due` at
once. Each due row is fired in a transaction of its own that locks the row (skipping it when
another process holds it), reads ``NextDueUtc <= now`` again under that lock, enqueues the slot's
job and moves ``NextDueUtc`` past ``now``. The job and the move commit together or not at all, so
a crash or a lost reply between them cannot lose a slot or fire it twice: a replay after a commit
it did not hear finds the row no longer due. The job also carries the slot's idempotency key
(``schedule:<name>@<slot>Z``), a second guard while it is live.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select, update
from sqlalchemy.exc import IntegrityError

from chokaq.domain.errors import NotFoundError
from chokaq.domain.models import EnqueueRequest
from chokaq.domain.schedules import (
    Fired,
    MissedPolicy,
    ScheduleInfo,
    ScheduleSpec,
    check_cron,
    next_slot,
    plan_firing,
    slot_key,
    zone,
)
from chokaq.storage import event_feed
from chokaq.storage.admin_types import Actor
from chokaq.storage.nulls import inline_nulls
from chokaq.storage.schema import schedules
from chokaq.storage.sqlfuncs import row_lock, utcnow
from chokaq.storage.statements.schedules import advance_statement, due_names_statement, lock_due_statement
from chokaq.storage.store import Storage

CODE_ACTOR = "code"
# The columns code owns: a change to one of them is written at the next start-up.
_DEFINITION = ("JobType", "Queue", "Payload", "Priority", "Cron", "TimeZone", "MissedPolicy", "MissedMax")


def _info(row: Any) -> ScheduleInfo:
    m = row._mapping
    return ScheduleInfo(
        name=m["Name"],
        job_type=m["JobType"],
        queue=m["Queue"],
        payload=m["Payload"],
        priority=int(m["Priority"]),
        cron=m["Cron"],
        time_zone=m["TimeZone"],
        missed_policy=m["MissedPolicy"],
        missed_max=int(m["MissedMax"]),
        next_due_utc=m["NextDueUtc"],
        last_slot_utc=m["LastSlotUtc"],
        last_fired_utc=m["LastFiredUtc"],
        last_job_id=m["LastJobId"],
        is_paused=bool(m["IsPaused"]),
        is_orphaned=bool(m["IsOrphaned"]),
        created_at_utc=m["CreatedAtUtc"],
        created_by=m["CreatedBy"],
        last_updated_utc=m["LastUpdatedUtc"],
        last_modified_by=m["LastModifiedBy"],
    )


def _definition(spec: ScheduleSpec) -> dict[str, Any]:
    return {
        "JobType": spec.job_type,
        "Queue": spec.queue or "default",
        "Payload": spec.payload,
        "Priority": spec.priority,
        "Cron": spec.cron,
        "TimeZone": spec.tz,
        "MissedPolicy": spec.missed,
        "MissedMax": spec.missed_max,
    }


def _audit(c: Connection, actor: Actor, action: str, job_ids: Sequence[str], details: dict[str, Any]) -> None:
    # The AuditLog row and its event feed row: every process's Deck hears of the change.
    event_feed.audit(c, actor, action, job_ids, details)


class ScheduleStore:
    """The Schedules table of one :class:`Storage`."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def _now(self, c: Connection) -> datetime:
        return self.storage.db_now(c).replace(tzinfo=None)

    # ------------------------------------------------------------------ code's schedules
    def sync(self, specs: Sequence[ScheduleSpec]) -> dict[str, list[str]]:
        """Upsert the code's schedules and mark the rows code no longer declares orphaned (they
        fire no more). A definition that changed is written; a new cron or time zone, or a row
        that comes back from orphaned, starts from its next slot. Returns the names per change."""
        wanted = {s.name: s for s in specs}

        def work(c: Connection) -> dict[str, list[str]]:
            now = self._now(c)
            rows = {r.Name: r for r in c.execute(select(schedules)).all()}
            out: dict[str, list[str]] = {"created": [], "updated": [], "orphaned": []}
            for name, spec in wanted.items():
                values = _definition(spec)
                row = rows.get(name)
                if row is None:
                    if self._insert(c, spec, values, now):
                        out["created"].append(name)
                    continue
                changed = {k: v for k, v in values.items() if row._mapping[k] != v}
                if not changed and not row.IsOrphaned:
                    continue
                if {"Cron", "TimeZone"} & changed.keys() or row.IsOrphaned:
                    changed["NextDueUtc"] = next_slot(spec.cron, spec.tz, now)
                changed.update(IsOrphaned=False, LastUpdatedUtc=now, LastModifiedBy=CODE_ACTOR)
                c.execute(update(schedules).where(schedules.c.Name == name).values(**inline_nulls(changed)))
                out["updated"].append(name)
            for name, row in rows.items():
                if name not in wanted and not row.IsOrphaned:
                    c.execute(
                        update(schedules)
                        .where(schedules.c.Name == name)
                        .values(IsOrphaned=True, LastUpdatedUtc=now, LastModifiedBy=CODE_ACTOR)
                    )
                    out["orphaned"].append(name)
            return out

        return self.storage.write(work, op="sync_schedules")

    @staticmethod
    def _insert(c: Connection, spec: ScheduleSpec, values: dict[str, Any], now: datetime) -> bool:
        row = {
            "Name": spec.name,
            **values,
            "NextDueUtc": next_slot(spec.cron, spec.tz, now),
            "IsPaused": False,
            "IsOrphaned": False,
            "CreatedAtUtc": now,
            "CreatedBy": CODE_ACTOR,
            "LastUpdatedUtc": now,
            "LastModifiedBy": CODE_ACTOR,
        }
        try:
            with c.begin_nested():
                c.execute(insert(schedules).values(**inline_nulls(row)))
        except IntegrityError:
            return False  # another process starting at the same moment stored it first
        return True

    # ------------------------------------------------------------------ firing
    def due(self) -> list[str]:
        """The names of the schedules due now (read without locks)."""
        return self.storage.read(lambda c: [r[0] for r in c.execute(due_names_statement())], op="due_schedules")

    def fire(self, name: str, *, grace: float) -> Fired | None:
        """Fire schedule ``name`` if it is due and no other process is firing it: one transaction
        (see the module's docstring). None when there was nothing to do."""

        def work(c: Connection) -> Fired | None:
            row = c.execute(lock_due_statement(), {"sched_name": name}).first()
            if row is None:
                return None  # another process holds it, or fired it already
            info = _info(row)
            now = row.now_utc.replace(tzinfo=None)
            policy: MissedPolicy = info.missed_policy  # type: ignore[assignment]
            plan = plan_firing(info.cron, info.time_zone, info.next_due_utc, now, policy, info.missed_max, grace)
            ids = [self._enqueue(c, info, slot) for slot in plan.slots]
            params: dict[str, Any] = {"sched_name": name, "next_due": plan.next_due}
            if ids:
                params.update(last_slot=plan.slots[-1], last_job=ids[-1])
            c.execute(advance_statement(bool(ids)), params)
            if ids:  # every process's Deck hears of the firing (storage/event_feed.py)
                event_feed.record(c, "schedule.fired", {"name": name, "count": len(ids), "ids": ids[-20:]})
            lag = (now - plan.slots[-1]).total_seconds() if plan.slots else 0.0
            return Fired(name, plan.slots, ids, plan.next_due, plan.dropped, lag)

        fired = self.storage.write(work, op="fire_schedule")
        if fired is not None and fired.job_ids:
            self.storage.announce()
        return fired

    def _enqueue(self, c: Connection, info: ScheduleInfo, slot: datetime | None, actor: str | None = None) -> str:
        return self._enqueue_request(c, info, slot, actor)[0]

    def _enqueue_request(
        self,
        c: Connection,
        info: ScheduleInfo,
        slot: datetime | None,
        actor: str | None = None,
        *,
        key: str | None = None,
    ) -> tuple[str, bool]:
        # The tag names the schedule and the slot (or the run-now) wherever the job goes next:
        # the archive and the DLQ keep tags, not idempotency keys.
        key = slot_key(info.name, slot) if slot is not None else key
        req = EnqueueRequest(
            type=info.job_type,
            payload=info.payload,
            queue=info.queue,
            priority=info.priority,
            idempotency_key=key,
            tags=slot_key(info.name, slot) if slot is not None else f"schedule:{info.name}@run-now",
            created_by=actor or f"schedule:{info.name}"[:100],
        )
        return self.storage.enqueue(req, conn=c)

    # ------------------------------------------------------------------ reads
    def list(self) -> list[ScheduleInfo]:
        query = select(schedules).order_by(schedules.c.Name)
        return self.storage.read(lambda c: [_info(r) for r in c.execute(query)], op="list_schedules")

    def get(self, name: str) -> ScheduleInfo:
        row = self.storage.read(lambda c: c.execute(select(schedules).where(schedules.c.Name == name)).first())
        if row is None:
            raise NotFoundError(f"no schedule {name!r}")
        return _info(row)

    # ------------------------------------------------------------------ operator actions (audited)
    def _locked(self, c: Connection, name: str) -> ScheduleInfo:
        row = c.execute(row_lock(select(schedules).where(schedules.c.Name == name), schedules)).first()
        if row is None:
            raise NotFoundError(f"no schedule {name!r}")
        return _info(row)

    def set_paused(self, name: str, paused: bool, actor: Actor) -> ScheduleInfo:
        """Pause, or resume from the next slot after now (the slots while paused are not missed:
        they were not wanted)."""

        def work(c: Connection) -> ScheduleInfo:
            before = self._locked(c, name)
            now = self._now(c)
            values: dict[str, Any] = {"IsPaused": paused, "LastUpdatedUtc": now, "LastModifiedBy": actor.name}
            if not paused and before.is_paused:
                values["NextDueUtc"] = next_slot(before.cron, before.time_zone, now)
            c.execute(update(schedules).where(schedules.c.Name == name).values(**inline_nulls(values)))
            _audit(c, actor, "schedule.pause" if paused else "schedule.resume", [], {"schedule": name})
            return _info(c.execute(select(schedules).where(schedules.c.Name == name)).one())

        return self.storage.write(work, op="pause_schedule")

    def run_now(self, name: str, actor: Actor) -> str:
        """Enqueue one job of schedule ``name`` now, outside its slots (which do not move)."""

        # A key of this request's own, made before the transaction: a replay after a lost commit
        # reply finds the job the lost attempt stored instead of storing a second one (and writes
        # no second audit row). 9 + 200 + 9 + 32 characters: within MAX_IDEMPOTENCY_KEY_LEN.
        request_key = f"schedule:{name}@run-now:{uuid.uuid4().hex}"

        def work(c: Connection) -> str:
            info = self._locked(c, name)
            job_id, created = self._enqueue_request(c, info, None, actor.name, key=request_key)
            if not created:
                return job_id
            c.execute(
                update(schedules)
                .where(schedules.c.Name == name)
                .values(LastJobId=job_id, LastFiredUtc=utcnow(), LastModifiedBy=actor.name)
            )
            _audit(c, actor, "schedule.run", [job_id], {"schedule": name})
            return job_id

        job_id = self.storage.write(work, op="run_schedule")
        self.storage.announce()
        return job_id

    def edit(self, name: str, actor: Actor, *, cron: str | None = None, tz: str | None = None) -> ScheduleInfo:
        """Change the cron expression or time zone (until code, the source of truth, writes its
        own again at the next start-up). Checked before anything is stored."""
        new_cron = check_cron(name, cron) if cron is not None else None
        if tz is not None:
            zone(name, tz)

        def work(c: Connection) -> ScheduleInfo:
            before = self._locked(c, name)
            now = self._now(c)
            after_cron, after_tz = new_cron or before.cron, tz or before.time_zone
            c.execute(
                update(schedules)
                .where(schedules.c.Name == name)
                .values(
                    Cron=after_cron,
                    TimeZone=after_tz,
                    NextDueUtc=next_slot(after_cron, after_tz, now),
                    LastUpdatedUtc=now,
                    LastModifiedBy=actor.name,
                )
            )
            details = {
                "schedule": name,
                "cron": {"before": before.cron, "after": after_cron},
                "time_zone": {"before": before.time_zone, "after": after_tz},
            }
            _audit(c, actor, "schedule.edit", [], details)
            return _info(c.execute(select(schedules).where(schedules.c.Name == name)).one())

        return self.storage.write(work, op="edit_schedule")
