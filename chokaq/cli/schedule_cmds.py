"""``chokaq schedules list | pause NAME | resume NAME | run NAME``: recurring jobs.

Changes go through the operations service, audited with ``--actor`` as the DLQ commands are."""

from __future__ import annotations

import json

import click

from chokaq.cli.admin_cmds import _actor, actor_option, printable
from chokaq.cli.common import Ctx, app_option, friendly_errors, pass_ctx
from chokaq.domain.schedules import ScheduleInfo, describe


def _as_dict(s: ScheduleInfo) -> dict[str, object]:
    def iso(value: object) -> object:
        return value.isoformat() + "Z" if hasattr(value, "isoformat") else value

    return {
        "name": s.name,
        "cron": s.cron,
        "cron_in_words": describe(s.cron),
        "time_zone": s.time_zone,
        "job_type": s.job_type,
        "queue": s.queue,
        "next_due_utc": iso(s.next_due_utc),
        "last_slot_utc": iso(s.last_slot_utc),
        "last_fired_utc": iso(s.last_fired_utc),
        "last_job_id": s.last_job_id,
        "paused": s.is_paused,
        "orphaned": s.is_orphaned,
        "missed": s.missed_policy,
    }


@click.group()
def schedules() -> None:
    """Recurring jobs: list, pause, resume, run now."""


@schedules.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@app_option
@pass_ctx
@friendly_errors
def schedules_list(c: Ctx, as_json: bool) -> None:
    """Every stored schedule, with its next and last run."""
    rows = [_as_dict(s) for s in c.operations.list_schedules()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        state = "orphaned" if r["orphaned"] else "paused" if r["paused"] else "active"
        click.echo(
            printable(
                f"{r['name']:<30} {r['cron']:<16} {r['time_zone']:<18} {state:<8} next {r['next_due_utc']}"
                f"  last {r['last_fired_utc'] or '-'}  job {r['last_job_id'] or '-'}"
            )
        )


@schedules.command("pause")
@click.argument("name")
@actor_option
@app_option
@pass_ctx
@friendly_errors
def schedules_pause(c: Ctx, name: str, actor: str) -> None:
    """Stop firing NAME until resumed (audited)."""
    click.echo(json.dumps(_as_dict(c.operations.pause_schedule(_actor(actor), name, True))))


@schedules.command("resume")
@click.argument("name")
@actor_option
@app_option
@pass_ctx
@friendly_errors
def schedules_resume(c: Ctx, name: str, actor: str) -> None:
    """Fire NAME again, from its next slot after now (audited)."""
    click.echo(json.dumps(_as_dict(c.operations.pause_schedule(_actor(actor), name, False))))


@schedules.command("run")
@click.argument("name")
@actor_option
@app_option
@pass_ctx
@friendly_errors
def schedules_run(c: Ctx, name: str, actor: str) -> None:
    """Enqueue one job of NAME now, without moving its slots (audited); prints the job id."""
    click.echo(c.operations.run_schedule(_actor(actor), name))
