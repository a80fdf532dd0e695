"""``chokaq``: schema, workers, sweeps, enqueue, inspection and the operator's DLQ actions."""

from __future__ import annotations

import json
import logging
import sys
import threading

import click
from sqlalchemy.exc import DBAPIError, OperationalError

from chokaq.cli import admin_cmds, breaker_cmds, dev, job_cmds, logs_text, schedule_cmds, worker_cmds
from chokaq.cli.common import Ctx, app_option, friendly_errors, one_line, pass_ctx
from chokaq.domain.errors import ConfigurationError
from chokaq.domain.payload import parse_payload_text
from chokaq.operations.job_out import JobOut, steps_out
from chokaq.redact import redact
from chokaq.runtime.app import ChokaQ
from chokaq.storage import load_steps

__all__ = ["Ctx", "app_option", "cli", "friendly_errors", "main", "pass_ctx"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", envvar="CHOKAQ_STORAGE_URL", help="Database URL (default sqlite:///./chokaq.db).")
@click.option("--app", "app_spec", envvar="CHOKAQ_APP", help="Your app as pkg.module:attribute.")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
@click.pass_context
def cli(ctx: click.Context, db: str | None, app_spec: str | None, verbose: bool) -> None:
    """chokaq: SQL-backed background jobs with heartbeats and zombie rescue."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    ctx.obj = Ctx(db, app_spec)


# ---------------------------------------------------------------- db
@cli.group()
def db() -> None:
    """Schema management."""


@db.command("upgrade")
@app_option
@pass_ctx
@friendly_errors
def db_upgrade(c: Ctx) -> None:
    """Create or upgrade the schema (idempotent; safe to run concurrently)."""
    app = c.app
    app.checked_schedules()  # a bad schedule stops here, before anything is written
    applied = app.storage.upgrade()
    app.apply_queue_settings()
    synced = app.sync_schedules()
    click.echo(json.dumps({"applied": applied, "dialect": app.storage.dialect, "schedules": synced}))


@db.command("script")
@click.option("--dialect", type=click.Choice(["mssql", "postgresql", "sqlite"]), required=True)
@click.option("--queries", is_flag=True, help="The hot-path and sweep statements instead of the DDL.")
def db_script(dialect: str, queries: bool) -> None:
    """Print the schema DDL (or, with --queries, the statements chokaq runs) as a plain script for a DBA."""
    if queries:
        from chokaq.storage import render_queries

        try:
            script = render_queries(dialect)
        except ValueError:  # a database whose hot path has no script of its own (SQLite)
            raise click.UsageError("--queries is for postgresql and mssql") from None
        click.echo(script, nl=False)
        return
    from chokaq.storage import render_script

    click.echo(render_script(dialect), nl=False)


# ---------------------------------------------------------------- worker and sweep
@cli.command()
@click.option("--queues", help="Comma-separated queues to serve (default: all).")
@click.option("--concurrency", type=click.IntRange(1, 1000), help="Handlers run at once (Execution.Concurrency).")
@click.option("--with-sweep", is_flag=True, help="Also run the recovery sweep in this process.")
@app_option
@pass_ctx
@friendly_errors
def worker(c: Ctx, queues: str | None, concurrency: int | None, with_sweep: bool) -> None:
    """Run a worker until SIGTERM/SIGINT."""
    from chokaq import telemetry

    app = c.app
    if not app.handlers:
        raise ConfigurationError("no handlers registered: pass --app pkg.module:app (or set CHOKAQ_APP)")
    app.checked_schedules()  # a bad schedule refuses to start, naming it, before any connection
    telemetry.configure("chokaq-worker")
    # No ping here: the worker waits for a database that is down (a failover) instead of exiting.
    names = [q.strip() for q in queues.split(",") if q.strip()] if queues else None
    try:
        app.worker(queues=names, concurrency=concurrency, with_sweep=with_sweep).run()
    finally:
        telemetry.shutdown()


@cli.command()
@click.option(
    "--loop",
    is_flag=True,
    help="Sweep every Recovery.ScanInterval, and fire due schedules every Schedules.PollInterval, until interrupted.",
)
@app_option
@pass_ctx
@friendly_errors
def sweep(c: Ctx, loop: bool) -> None:
    """Run the recovery sweep and print {"recovered": n, "archived": m}; fire the schedules due now."""
    from chokaq import telemetry
    from chokaq.runtime.sweeper import run_sweep

    app = c.app
    app.checked_schedules()
    telemetry.configure("chokaq-sweep")
    # No events (run_sweep without ``events``): no stream is served from this process; the Deck
    # sees a rescue in the database counts on its next stats tick.
    try:
        app.sync_schedules()
        if not loop:
            app.fire_schedules()
            click.echo(json.dumps(run_sweep(app.storage, app.settings).as_dict()))
            return
        _sweep_loop(app)
    finally:
        telemetry.shutdown()


def _sweep_loop(app: ChokaQ) -> None:
    """Fire due schedules every Schedules.PollInterval and sweep every Recovery.ScanInterval until
    SIGINT or SIGTERM; a failure is one line on stderr, and the loop goes on."""
    import signal
    import time

    from chokaq.runtime.sweeper import run_sweep

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    next_sweep = 0.0
    while not stop.is_set():
        try:
            app.fire_schedules()
            if time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + app.settings.recovery.scan_interval
                click.echo(json.dumps(run_sweep(app.storage, app.settings).as_dict()))
        except (OperationalError, DBAPIError) as exc:
            click.echo(f"sweep failed: {one_line(exc)}", err=True)
        except Exception as exc:  # a bug in one pass must not end the loop that recovers zombies
            click.echo(f"sweep failed: {type(exc).__name__}: {redact(one_line(exc))}", err=True)
        stop.wait(min(app.settings.schedules.poll_interval, app.settings.recovery.scan_interval))


@cli.command()
@app_option
@pass_ctx
@friendly_errors
def retention(c: Ctx) -> None:
    """Delete archived jobs older than Retention.ArchiveDays and, when Retention.DlqDays is set,
    dead jobs older than that, in batches of Storage.CleanupBatchSize (audited as system:retention).
    Run it from cron or a scheduler; the Functions app has a timer for it."""
    from chokaq.operations.retention import run_retention

    click.echo(json.dumps(run_retention(c.operations).as_dict()))


# ---------------------------------------------------------------- jobs
@cli.command()
@click.argument("job_type")
@click.option("--payload", default="{}", show_default=True, help="JSON payload.")
@click.option("--queue", default=None, help="Queue (default: the handler's queue, else 'default').")
@click.option("--priority", type=int, default=10, show_default=True, help="Higher runs first.")
@click.option("--delay", type=float, default=0.0, help="Seconds before the job is due.")
@click.option(
    "--at", "at_text", default=None, help="Or: when it is due, an ISO time with its offset (...+01:00, ...Z)."
)
@click.option("--idempotency-key", default=None)
@click.option("--tags", default=None)
@click.option("--created-by", default=None, help="Recorded as CreatedBy.")
@app_option
@pass_ctx
@friendly_errors
def enqueue(
    c: Ctx,
    job_type: str,
    payload: str,
    queue: str | None,
    priority: int,
    delay: float,
    at_text: str | None,
    idempotency_key: str | None,
    tags: str | None,
    created_by: str | None,
) -> None:
    """Enqueue a job and print its id."""
    data = parse_payload_text(payload)  # the payload gate: strict JSON, Unicode, depth, size
    app = c.app
    req = app.prepare(
        job_type,
        data,
        queue=queue,
        priority=priority,
        delay=delay,
        at=None if at_text is None else job_cmds.parse_at(at_text),
        tags=tags,
        idempotency_key=idempotency_key,
        created_by=created_by,
    )
    job_id, _ = c.operations.enqueue(req)
    click.echo(job_id)


@cli.group()
def job() -> None:
    """Inspect jobs wherever they are; reschedule a Pending one."""


@job.command("show")
@click.argument("job_id")
@click.option("--logs", "as_text", is_flag=True, help="Print its attempts, steps, progress and logs as text instead.")
@app_option
@pass_ctx
@friendly_errors
def job_show(c: Ctx, job_id: str, as_text: bool) -> None:
    """Print the job as JSON (hot, archive or DLQ), with its attempts, steps, logs and progress."""
    record = c.app.storage.get_job(job_id)
    if record is None:
        click.echo(f"error: no job {job_id!r} in hot, archive or DLQ", err=True)
        sys.exit(1)
    steps = steps_out(load_steps(c.app.storage, record.id))
    out = JobOut.from_record(record, steps=steps)
    if as_text:
        click.echo("\n".join(logs_text.render(out)))
        return
    click.echo(json.dumps(out.model_dump(), indent=2))


@job.command("cancel")
@click.argument("job_ids", nargs=-1, required=True)
@click.option("--reason", default=None, help="Why; recorded in ErrorDetails and the audit log.")
@click.option("--pending-only", is_flag=True, help="Skip jobs a worker holds instead of stopping them.")
@click.option("--actor", default=None, help="Name recorded in the audit log (default cli:$USER; role: admin).")
@app_option
@pass_ctx
@friendly_errors
def job_cancel(c: Ctx, job_ids: tuple[str, ...], reason: str | None, pending_only: bool, actor: str | None) -> None:
    """Cancel jobs: Pending ones, and running ones (Fetched, Processing) unless --pending-only. They
    move to the DLQ as Cancelled; a running job's handler is told to stop (ctx.cancel_reason is
    "cancelled"), at once on PostgreSQL, else at its worker's next heartbeat. Exit 1 if none was."""
    res = c.operations.cancel(admin_cmds.actor_for(actor), list(job_ids), running=not pending_only, reason=reason)
    click.echo(json.dumps({"cancelled": res.affected, "was_running": res.was_running, "skipped_ids": res.skipped_ids}))
    if not res.affected:
        click.echo("error: nothing was cancelled (finished, unknown, or held and --pending-only)", err=True)
        sys.exit(1)


@cli.command()
@app_option
@pass_ctx
@friendly_errors
def health(c: Ctx) -> None:
    """Exit 0 when healthy (container health checks). With Execution.HealthFile, the worker's own
    account decides: it rides out a database outage for Storage.OutageTolerance and is unhealthy
    past it. Without one (or before a worker wrote it): exit 0 when the database answers."""
    from chokaq.runtime.outage import read_health

    health_file = c.app.settings.execution.health_file
    if health_file:
        healthy, reason = read_health(health_file)
        if not healthy:
            click.echo(f"error: unhealthy: {reason}", err=True)
            sys.exit(1)
        if reason != "no worker health file":
            click.echo(json.dumps({"status": "ok", "worker": reason}))
            return
    now = c.app.storage.ping()
    click.echo(json.dumps({"status": "ok", "db_time_utc": now.isoformat()}))


@cli.command()
@app_option
@pass_ctx
@friendly_errors
def stats(c: Ctx) -> None:
    """Per-queue counts as JSON."""
    from dataclasses import asdict

    rows = [asdict(s) for s in c.app.storage.queue_stats()]
    click.echo(json.dumps(rows, indent=2, default=str))


# Every subcommand that lives in another module, registered here by name, so that importing ``cli``
# gives the whole command line (not only a call of main()).
for _command in (
    admin_cmds.serve,
    admin_cmds.dlq,
    admin_cmds.archive,
    schedule_cmds.schedules,
    breaker_cmds.breakers,
    worker_cmds.workers,
    dev.dev,
):
    cli.add_command(_command)
job.add_command(job_cmds.job_reschedule)


def main() -> None:
    cli(prog_name="chokaq")


if __name__ == "__main__":
    main()
