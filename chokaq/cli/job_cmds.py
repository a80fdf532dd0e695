"""``chokaq job reschedule``: an operator's action on one hot job (main.py's ``job`` group holds
it beside ``job show``). Through the operations service, audited with ``--actor`` in the admin
role, as the dlq commands are."""

from __future__ import annotations

import json
from datetime import datetime

import click

from chokaq.cli.admin_cmds import _actor, actor_option
from chokaq.cli.common import Ctx, friendly_errors, pass_ctx
from chokaq.domain.errors import JobValidationError
from chokaq.operations.job_out import JobOut


def parse_at(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise JobValidationError(f"--at {text!r} is not an ISO time such as 2026-12-24T08:00+01:00") from None
    # An ISO time without an offset parses naive: prepare and reschedule refuse it by name.


@click.command("reschedule")
@click.argument("job_id")
@click.option("--at", "at_text", help="When to run it: an ISO time with its offset (2026-12-24T08:00+01:00, ...Z).")
@click.option("--now", is_flag=True, help="Run it now (as soon as a worker is free).")
@actor_option
@pass_ctx
@friendly_errors
def job_reschedule(c: Ctx, job_id: str, at_text: str | None, now: bool, actor: str) -> None:
    """Move a Pending job's due time (--at) or make it due now (--now)."""
    if now == (at_text is not None):
        raise JobValidationError("give --at TIME or --now (one of them)")
    at = None if at_text is None else parse_at(at_text)
    rec = c.operations.reschedule(_actor(actor), job_id, at)
    click.echo(json.dumps(JobOut.from_record(rec).model_dump(mode="json"), indent=2))
