"""The sample app behind ``chokaq dev``: a few handlers that show every path an operator meets."""

from __future__ import annotations

import asyncio
import random

from pydantic import BaseModel, Field

from chokaq import ChokaQ, JobContext

app = ChokaQ()


class Email(BaseModel):
    to: str = Field(pattern=r"^[^@\s]+@[^@\s]+$", description="recipient address")
    subject: str = Field(min_length=1)
    body: str = ""


class Report(BaseModel):
    name: str
    seconds: float = Field(default=20.0, ge=0, le=600)


@app.job("email_v1", queue="notifications", payload=Email)
async def send_email(email: Email, ctx: JobContext) -> None:
    """Fails at once (FatalError) when the payload does not match ``Email``: the seed's story."""
    await asyncio.sleep(0.05)


@app.job("report_v1", queue="reports", payload=Report)
async def build_report(report: Report, ctx: JobContext) -> None:
    """Slow: heartbeats keep it alive; a SIGKILL mid-run leaves a zombie for the sweep."""
    waited = 0.0
    while waited < report.seconds and not ctx.is_cancelled():
        await asyncio.sleep(0.5)
        waited += 0.5


@app.job("flaky_v1")
def flaky(payload: dict[str, object]) -> None:
    """Fails half the time, so retries and MaxRetriesExceeded show up."""
    if random.random() < float(str(payload.get("fail_rate", 0.5))):
        raise ConnectionError("upstream timed out (simulated)")


@app.job("noop")
def noop(payload: object) -> None:
    return None


__all__ = ["app"]
