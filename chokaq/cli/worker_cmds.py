"""``chokaq workers [WORKER_ID] [--state S] [--json]``: the worker processes the database has heard
from, live, stopped or lost, with the jobs each holds now and its zombies (docs/workers.md)."""

from __future__ import annotations

import json
from typing import Any, cast

import click

from chokaq.cli.admin_cmds import printable
from chokaq.cli.common import Ctx, app_option, friendly_errors, pass_ctx
from chokaq.domain.errors import NotFoundError
from chokaq.domain.workers import HeldJob, WorkerInfo, WorkerState
from chokaq.storage import WorkerDirectory


def _iso(value: Any) -> Any:
    return value.isoformat() + "Z" if value is not None else None


def _job(j: HeldJob) -> dict[str, Any]:
    return {"id": j.id, "queue": j.queue, "type": j.type, "status": j.status, "at_utc": _iso(j.at_utc)}


def _as_dict(w: WorkerInfo, *, detail: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "worker_id": w.worker_id,
        "state": w.state,
        "host": w.host,
        "pid": w.pid,
        "version": w.version,
        "queues": w.queues,
        "concurrency": w.concurrency,
        "running": w.running,
        "holding": w.holding,
        "zombies": w.zombies,
        "started_at_utc": _iso(w.started_at_utc),
        "last_seen_utc": _iso(w.last_seen_utc),
        "stopped_at_utc": _iso(w.stopped_at_utc),
    }
    if detail:
        out["held_jobs"] = [_job(j) for j in w.held_jobs]
        out["zombie_jobs"] = [_job(j) for j in w.zombie_jobs]
    return out


HEADER = f"{'WORKER':<40} {'STATE':<8} {'HOST':<20} {'PID':>7} {'RUN':>4} {'HOLD':>5} {'ZOMB':>5}  LAST SEEN (UTC)"


def _row(w: WorkerInfo) -> str:
    seen = w.last_seen_utc.isoformat(sep=" ", timespec="seconds")
    counts = f"{w.pid:>7} {w.running:>4} {w.holding:>5} {w.zombies:>5}"
    return printable(f"{w.worker_id:<40} {w.state:<8} {w.host[:20]:<20} {counts}  {seen}")


@click.command("workers")
@click.argument("worker_id", required=False)
@click.option("--state", type=click.Choice(["live", "stopped", "lost"]), help="Only workers in this state.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@app_option
@pass_ctx
@friendly_errors
def workers(c: Ctx, worker_id: str | None, state: str | None, as_json: bool) -> None:
    """Worker processes, live first, with the jobs each holds (HOLD) and its zombies (ZOMB); with
    WORKER_ID, that worker and the jobs named."""
    directory = WorkerDirectory(c.app.storage)
    if worker_id is not None:
        info = directory.get(worker_id)
        if info is None:
            raise NotFoundError(f"no worker {worker_id[:100]!r}")
        if as_json:
            click.echo(json.dumps(_as_dict(info, detail=True), indent=2))
            return
        click.echo(HEADER)
        click.echo(_row(info))
        for label, jobs in (("held", info.held_jobs), ("zombie", info.zombie_jobs)):
            for j in jobs:
                click.echo(printable(f"  {label:<7} {j.id:<28} {j.status:<11} {j.queue[:20]:<20} {j.type[:40]}"))
        return
    rows = directory.list(cast("WorkerState | None", state))
    if as_json:
        click.echo(json.dumps([_as_dict(w) for w in rows], indent=2))
        return
    click.echo(HEADER)
    for w in rows:
        click.echo(_row(w))
