"""Response bodies of the circuit-breaker routes (docs/circuit-breaker.md)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class BreakerOut(BaseModel):
    job_type: str
    state: str = Field(description="closed, open or half_open")
    failure_count: int = Field(description="failed attempts counted in the current window (or since it opened)")
    window_start_utc: str | None
    opened_at_utc: str | None
    open_until_utc: str | None = Field(description="when probes may start (open)")
    probes_in_flight: int
    updated_by: str | None = Field(description="the worker or operator behind the last change")
    last_updated_utc: str | None


class BreakerListOut(BaseModel):
    items: list[BreakerOut]
