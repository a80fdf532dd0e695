"""``chokaq breakers list | close TYPE``: the circuit breakers per job type (docs/circuit-breaker.md).

A close goes through the operations service, audited with ``--actor`` as the DLQ commands are."""

from __future__ import annotations

import json

import click

from chokaq.cli.admin_cmds import _actor, actor_option, printable
from chokaq.cli.common import Ctx, app_option, friendly_errors, pass_ctx
from chokaq.domain.breakers import BreakerState


def _iso(value: object) -> object:
    return value.isoformat() + "Z" if hasattr(value, "isoformat") else value


def _as_dict(b: BreakerState) -> dict[str, object]:
    return {
        "job_type": b.job_type,
        "state": b.state_name,
        "failure_count": b.failure_count,
        "opened_at_utc": _iso(b.opened_at_utc),
        "open_until_utc": _iso(b.open_until_utc),
        "probes_in_flight": b.probes_in_flight,
        "updated_by": b.updated_by,
        "last_updated_utc": _iso(b.last_updated_utc),
    }


@click.group()
def breakers() -> None:
    """Circuit breakers per job type: list, close."""


@breakers.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@app_option
@pass_ctx
@friendly_errors
def breakers_list(c: Ctx, as_json: bool) -> None:
    """Every job type whose breaker has counted a failure, with its state."""
    rows = [_as_dict(b) for b in c.operations.list_breakers()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no circuit breakers")
    for r in rows:
        until = f"  until {r['open_until_utc']}" if r["state"] == "open" else ""
        click.echo(
            printable(
                f"{r['job_type']:<40} {r['state']:<10} failures {r['failure_count']:<6}"
                f" by {r['updated_by'] or '-'}{until}"
            )
        )


@breakers.command("close")
@click.argument("job_type")
@actor_option
@app_option
@pass_ctx
@friendly_errors
def breakers_close(c: Ctx, job_type: str, actor: str) -> None:
    """Close JOB_TYPE's breaker now: its jobs are claimed again (audited)."""
    click.echo(json.dumps(_as_dict(c.operations.close_breaker(_actor(actor), job_type))))
