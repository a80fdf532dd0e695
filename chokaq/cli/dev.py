"""``chokaq dev``: the embedded demo on a SQLite file, with worker, sweep, admin API and the Deck."""

from __future__ import annotations

import logging
import threading
import time

import click

from chokaq.cli.common import Ctx, friendly_errors, pass_ctx
from chokaq.domain.models import EnqueueRequest
from chokaq.loading import load_app
from chokaq.operations.rules import is_loopback
from chokaq.redact import redact
from chokaq.runtime.app import ChokaQ

log = logging.getLogger("chokaq.dev")

DEV_DB = "sqlite:///./chokaq-dev.db"


def seed(app: ChokaQ) -> None:
    """A few jobs so every panel has something: one is the seed's malformed email."""
    s = app.storage
    s.enqueue(
        EnqueueRequest(
            type="email_v1",
            queue="notifications",
            created_by="dev-seed",
            payload='{"to": "user@example.com", "subject": "Welcome!", "body": "Hello"}',
        )
    )
    # Missing subject and a bad address: fails validation, lands in the DLQ as FatalError.
    s.enqueue(
        EnqueueRequest(
            type="email_v1",
            queue="notifications",
            created_by="dev-seed",
            tags="welcome",
            payload='{"to": "user-at-example.com", "body": "Hello, World!"}',
        )
    )
    s.enqueue(
        EnqueueRequest(
            type="report_v1", queue="reports", created_by="dev-seed", payload='{"name": "monthly", "seconds": 30}'
        )
    )
    for i in range(5):
        s.enqueue(EnqueueRequest(type="flaky_v1", created_by="dev-seed", payload=f'{{"n": {i}, "fail_rate": 0.6}}'))
    s.enqueue(EnqueueRequest(type="noop", created_by="dev-seed", delay_seconds=60))


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=7071, show_default=True, type=int)
@click.option("--no-seed", is_flag=True, help="Do not add the sample jobs.")
@click.option(
    "--open/--auth",
    "open_access",
    default=True,
    show_default=True,
    help="Anonymous admin access (only allowed on a loopback host).",
)
@pass_ctx
@friendly_errors
def dev(c: Ctx, host: str, port: int, no_seed: bool, open_access: bool) -> None:
    """Run the demo: SQLite file, sample handlers, a worker, the sweep, the admin API and the Deck."""
    import uvicorn

    from chokaq.api.app import create_api

    app = load_app(c.app_spec or "chokaq.demo:app", db=c.db or DEV_DB)
    # Short timeouts so the recovery model can be watched live.
    app.settings.recovery.scan_interval = 10
    if open_access and not is_loopback(host):
        raise click.UsageError("--open only works on a loopback --host; use --auth with CHOKAQ_ADMIN__TOKENS")
    app.storage.upgrade()
    app.apply_queue_settings()
    if not no_seed and not app.storage.queue_stats():
        seed(app)  # only into a new database: restarting the demo keeps what you did
    worker = app.worker(with_sweep=True)
    t = threading.Thread(target=worker.run, kwargs={"install_signals": False}, name="chokaq-dev-worker", daemon=True)
    t.start()
    if open_access:
        click.secho(
            "WARNING: chokaq dev runs the admin API WITHOUT authentication (anyone on this machine is admin). "
            "Never expose it.",
            fg="red",
            bold=True,
            err=True,
        )
    click.echo(f"chokaq dev: database {redact(app.settings.storage_url)}")
    click.echo(f"  the Deck:    http://{host}:{port}/deck")
    click.echo(f"  admin API:   http://{host}:{port}/api/stats   (OpenAPI: /openapi.json)")
    from chokaq.cli.admin_cmds import bind_hosts

    api = create_api(app, dev_open=open_access, allowed_hosts=bind_hosts(host))
    try:
        uvicorn.run(api, host=host, port=port, log_level="warning")
    finally:
        worker.stop()
        deadline = time.monotonic() + app.settings.execution.shutdown_grace + 5
        while t.is_alive() and time.monotonic() < deadline:
            t.join(0.2)
