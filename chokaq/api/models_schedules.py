"""Request and response bodies of the Schedules routes (docs/schedules.md)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from chokaq.api.models import Text, _In
from chokaq.domain import limits

ScheduleName = Annotated[Text, Field(min_length=1, max_length=limits.MAX_SCHEDULE_NAME_LEN)]


class ScheduleOut(BaseModel):
    name: str
    cron: str
    cron_in_words: str
    time_zone: str
    job_type: str
    queue: str
    payload: str
    missed_policy: str
    missed_max: int
    next_due_utc: str | None
    last_slot_utc: str | None
    last_fired_utc: str | None
    last_job_id: str | None
    last_job_outcome: str | None = Field(
        description="where the last job is now: Pending, Fetched, Processing, Succeeded, a DLQ reason, or gone"
    )
    is_paused: bool
    is_orphaned: bool
    last_modified_by: str | None
    last_updated_utc: str | None


class ScheduleListOut(BaseModel):
    items: list[ScheduleOut]
    source_of_truth: str = Field(
        default="code: a cron edited here lasts until the next worker or sweep start-up writes the code's own again"
    )


class SchedulePatchIn(_In):
    """Admin only. Absent fields are unchanged."""

    cron: Annotated[Text, Field(min_length=1, max_length=limits.MAX_CRON_LEN)] | None = None
    time_zone: Annotated[Text, Field(min_length=1, max_length=limits.MAX_TIME_ZONE_LEN)] | None = None


class ScheduleRunOut(BaseModel):
    job_id: str
