"""Operator commands: ``chokaq serve``, ``chokaq dlq ...`` and ``chokaq archive purge``.

Every change goes through the operations service (:mod:`chokaq.operations.service`), so it
follows the API's rules and is audited exactly like the API's, with the actor ``--actor``
(default ``cli:$USER``) in the admin role. It publishes no live events (see ``Ctx.operations``).
"""

from __future__ import annotations

import functools
import getpass
import json
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from chokaq.cli.common import Ctx, friendly_errors, pass_ctx
from chokaq.domain import limits
from chokaq.domain.errors import JobValidationError
from chokaq.domain.states import Location
from chokaq.domain.steps import ResurrectSteps
from chokaq.operations.job_out import JobOut, steps_out
from chokaq.operations.rules import is_loopback, parse_failure_reason
from chokaq.operations.service import Selection
from chokaq.storage import Actor, AdminStore, BulkResult, JobFilter, crash_incidents, load_steps


def _default_actor() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # no user name in some containers
        user = "unknown"
    return f"cli:{user}"[: limits.MAX_ACTOR_LEN]


actor_option = click.option(
    "--actor", default=_default_actor, show_default="cli:$USER", help="Name recorded in the audit log (role: admin)."
)
yes_option = click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")


def _actor(name: str) -> Actor:
    return Actor(name, "admin")


def actor_for(name: str | None) -> Actor:
    """The CLI's actor: ``name`` (default ``cli:$USER``), in the admin role."""
    return _actor(name or _default_actor())


# ---------------------------------------------------------------- serve
def bind_hosts(host: str) -> list[str] | None:
    """The ``Host`` values a server bound to ``host`` answers to (DNS rebinding: a page on an
    attacker's name that resolves to 127.0.0.1 sends its own name). ``None`` for a wildcard bind:
    then only ``Admin.AllowedHosts`` can say which names are ours."""
    if host in ("0.0.0.0", "::", ""):
        return None
    if is_loopback(host):
        return sorted({host, "127.0.0.1", "localhost", "::1"})
    return [host]


@click.command()
@click.option("--app", "app_spec", default=None, help="Your app as pkg.module:attribute (or CHOKAQ_APP).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(1, 65535), default=7071, show_default=True)
@pass_ctx
@friendly_errors
def serve(c: Ctx, app_spec: str | None, host: str, port: int) -> None:
    """Serve the admin API with uvicorn (bearer tokens from CHOKAQ_ADMIN__TOKENS)."""
    import uvicorn

    from chokaq import telemetry
    from chokaq.api import create_api

    if app_spec:
        c.app_spec = app_spec
    app = c.app
    telemetry.configure("chokaq-api")
    hosts = bind_hosts(host)
    api = create_api(app, allowed_hosts=hosts)
    if hosts is None and not app.settings.admin.allowed_hosts:
        click.echo(
            f"warning: bound to {host}: the Host header is not checked; set CHOKAQ_ADMIN__ALLOWED_HOSTS "
            '(e.g. ["chokaq.example.com"])',
            err=True,
        )
    if not is_loopback(host) and not app.settings.admin.tokens and not app.settings.admin.trust_app_service_auth:
        click.echo(f"warning: serving on {host} with no admin tokens: every call but /api/health is refused", err=True)
    try:
        uvicorn.run(api, host=host, port=port, log_level=app.settings.log_level.lower())
    finally:
        telemetry.shutdown()


# ---------------------------------------------------------------- dlq
@click.group()
def dlq() -> None:
    """Inspect, resurrect and purge dead-lettered jobs."""


# C0 and C1 controls, DEL, and the bidirectional overrides that reorder what a terminal shows.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """A field as a table may print it: job data and actor names can carry escape sequences that
    would otherwise drive the operator's terminal (retitle it, hide lines, fake output)."""
    return _UNPRINTABLE.sub("\ufffd", text)


def _first_line(text: str | None, width: int = 60) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


@dlq.command("list")
@click.option("--queue")
@click.option("--type", "job_type")
@click.option("--reason", help="Failure reason: name (Zombie, FatalError, ...) or number.")
@click.option("--search", help="Text in id, type, tags or error details.")
@click.option("--page", type=click.IntRange(1), default=1, show_default=True)
@click.option("--page-size", type=click.IntRange(1, limits.MAX_BULK_IDS), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_ctx
@friendly_errors
def dlq_list(
    c: Ctx,
    queue: str | None,
    job_type: str | None,
    reason: str | None,
    search: str | None,
    page: int,
    page_size: int,
    as_json: bool,
) -> None:
    """List dead jobs, newest failure first."""
    f = JobFilter(queue=queue, type=job_type, failure_reason=parse_failure_reason(reason), search=search)
    store = AdminStore(c.app.storage, count_cap=c.app.settings.admin.exact_count_limit)
    p = store.list_jobs(Location.DLQ, f, page=page, page_size=page_size)
    if as_json:
        items = [JobOut.from_record(j, history=False).model_dump() for j in p.items]
        body = {"items": items, "total": p.total, "page": p.page, "page_size": p.page_size}
        click.echo(json.dumps({**body, "total_is_lower_bound": p.total_is_lower_bound}, indent=2))
        return
    rows = [
        tuple(
            printable(v)
            for v in (
                j.id,
                j.queue,
                j.type,
                j.failure_reason.label if j.failure_reason is not None else "",
                str(j.attempt_count),
                j.failed_at_utc.strftime("%Y-%m-%d %H:%M:%S") if j.failed_at_utc else "",
                _first_line(j.error_details),
            )
        )
        for j in p.items
    ]
    header = ("ID", "QUEUE", "TYPE", "REASON", "ATT", "FAILED (UTC)", "ERROR")
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i]) for i in range(6)]
    click.echo("  ".join(h.ljust(w) for h, w in zip(header, [*widths, 0], strict=True)).rstrip())
    for r in rows:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, [*widths, 0], strict=True)).rstrip())
    shown_to = (page - 1) * page_size + len(rows)
    total = f"{p.total:,}+" if p.total_is_lower_bound else str(p.total)
    click.echo(f"-- {len(rows) and (page - 1) * page_size + 1}-{shown_to} of {total}", err=True)


@dlq.command("show")
@click.argument("job_id")
@pass_ctx
@friendly_errors
def dlq_show(c: Ctx, job_id: str) -> None:
    """Print a dead job with its full error details (and the handler's payload schema, if any)."""
    rec = c.app.storage.get_job(job_id)
    if rec is None or rec.location is not Location.DLQ:
        where = f" (it is in {rec.location.value})" if rec is not None else ""
        click.echo(f"error: no job {job_id!r} in the DLQ{where}", err=True)
        sys.exit(1)
    out = JobOut.from_record(rec, steps=steps_out(load_steps(c.app.storage, rec.id))).model_dump()
    handler = c.app.handlers.get(rec.type)
    out["payload_schema"] = handler.payload_schema() if handler else None
    click.echo(json.dumps(out, indent=2))


def _bulk_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for opt in reversed(
        [
            click.argument("ids", nargs=-1),
            click.option("--filter-queue", help="Match dead jobs of this queue."),
            click.option("--filter-reason", help="Match this failure reason (name or number)."),
            click.option("--filter-type", help="Match this job type."),
            click.option("--search", help="Match text in id, type, tags or error details."),
            click.option(
                "--filter-worker", help="Match dead jobs this worker held (a crash incident: `dlq incidents`)."
            ),
            click.option(
                "--max-jobs",
                type=click.IntRange(1),
                default=limits.DEFAULT_BULK_MAX_JOBS,
                show_default=True,
                help="At most this many matched jobs (done in batches of 1000).",
            ),
            click.option("--dry-run", is_flag=True, help="Only count what matches and show sample ids."),
            yes_option,
            actor_option,
        ]
    ):
        fn = opt(fn)
    return fn


def _run_bulk(
    c: Ctx,
    verb: str,
    action: Callable[[Actor, Selection], BulkResult],
    ids: tuple[str, ...],
    filter_queue: str | None,
    filter_reason: str | None,
    filter_type: str | None,
    search: str | None,
    max_jobs: int,
    dry_run: bool,
    yes: bool,
    actor: str,
    filter_worker: str | None = None,
) -> None:
    who = _actor(actor)
    has_filter = any((filter_queue, filter_reason, filter_type, search, filter_worker))
    if bool(ids) == has_filter:
        raise JobValidationError(
            "give job ids, or --filter-queue/--filter-reason/--filter-type/--filter-worker/--search"
        )
    f = (
        JobFilter(
            queue=filter_queue,
            type=filter_type,
            failure_reason=parse_failure_reason(filter_reason),
            search=search,
            worker=filter_worker,
        )
        if has_filter
        else None
    )
    step = limits.MAX_BULK_IDS
    if f is None:
        id_list = list(dict.fromkeys(ids))
        chunks = [id_list[i : i + step] for i in range(0, len(id_list), step)]
        preview = BulkResult(0, 0, dry_run=True)
        for chunk in chunks:
            r = action(who, Selection(ids=chunk, dry_run=True))
            preview.matched += r.matched
            preview.sample_ids.extend(r.sample_ids[: 20 - len(preview.sample_ids)])
        planned = preview.matched
    else:
        preview = action(who, Selection(f=f, max_jobs=min(max_jobs, step), dry_run=True))
        planned = min(preview.matched, max_jobs)
    if dry_run:
        click.echo(
            json.dumps(
                {"matched": preview.matched, "would_affect": planned, "sample_ids": preview.sample_ids, "dry_run": True}
            )
        )
        return
    if planned == 0:
        click.echo(json.dumps({"matched": preview.matched, "affected": 0, "skipped_ids": list(ids)}))
        return
    if not yes:
        click.confirm(f"{verb} {planned} dead job(s) (matched {preview.matched})?", abort=True, err=True)
    affected = 0
    skipped: list[str] = []
    with click.progressbar(length=planned, label=verb.capitalize(), file=sys.stderr) as bar:
        if f is None:
            for chunk in chunks:
                r = action(who, Selection(ids=chunk))
                affected += r.affected
                skipped.extend(r.skipped_ids)
                bar.update(len(chunk))
        else:
            while affected < planned:
                # Bound to the preview: only jobs it counted, refused (409) if more match now.
                r = action(
                    who,
                    Selection(
                        f=f,
                        max_jobs=min(step, planned - affected),
                        expected_count=preview.matched - affected,
                        snapshot=preview.snapshot,
                    ),
                )
                if r.affected == 0:
                    break
                affected += r.affected
                bar.update(r.affected)
    click.echo(json.dumps({"matched": preview.matched, "affected": affected, "skipped_ids": skipped}))


@dlq.command("resurrect")
@_bulk_options
@click.option(
    "--steps",
    type=click.Choice(["resume", "scratch"]),
    default=None,
    help="Their step journals: resume after the finished steps (the default) or from scratch (cleared). Audited.",
)
@pass_ctx
@friendly_errors
def dlq_resurrect(
    c: Ctx,
    ids: tuple[str, ...],
    filter_queue: str | None,
    filter_reason: str | None,
    filter_type: str | None,
    filter_worker: str | None,
    search: str | None,
    max_jobs: int,
    dry_run: bool,
    yes: bool,
    actor: str,
    steps: ResurrectSteps | None,
) -> None:
    """Move dead jobs back to Pending (attempts reset, priority 10), by ids or by filter."""
    _run_bulk(
        c,
        "resurrect",
        functools.partial(c.operations.resurrect_many, steps=steps),
        ids,
        filter_queue,
        filter_reason,
        filter_type,
        search,
        max_jobs,
        dry_run,
        yes,
        actor,
        filter_worker,
    )


@dlq.command("incidents")
@pass_ctx
@friendly_errors
def dlq_incidents(c: Ctx) -> None:
    """Crash incidents: the zombies each worker left, still in the DLQ or taken out since (JSON).
    Decide for one with `dlq resurrect|purge --filter-worker W --filter-reason Zombie` (previewed first)."""
    within = timedelta(seconds=c.app.settings.recovery.worker_retention)
    found, capped = crash_incidents(c.app.storage, resolved_within=within)
    items = [{k: (v.isoformat() + "Z" if isinstance(v, datetime) else v) for k, v in vars(i).items()} for i in found]
    click.echo(json.dumps({"items": items, "capped": capped}, indent=2))


@dlq.command("purge")
@_bulk_options
@pass_ctx
@friendly_errors
def dlq_purge(
    c: Ctx,
    ids: tuple[str, ...],
    filter_queue: str | None,
    filter_reason: str | None,
    filter_type: str | None,
    filter_worker: str | None,
    search: str | None,
    max_jobs: int,
    dry_run: bool,
    yes: bool,
    actor: str,
) -> None:
    """Delete dead jobs for good, by ids or by filter."""
    _run_bulk(
        c,
        "purge",
        c.operations.purge_dlq,
        ids,
        filter_queue,
        filter_reason,
        filter_type,
        search,
        max_jobs,
        dry_run,
        yes,
        actor,
        filter_worker,
    )


# ---------------------------------------------------------------- archive
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_older_than(value: str, now: datetime | None = None) -> datetime:
    """``30d``/``12h``/``90m``/``2w`` ago, or an ISO timestamp (UTC if it has no offset); naive UTC out."""
    m = _AGE.match(value)
    now = now or datetime.now(UTC).replace(tzinfo=None)
    if m:
        return now - timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2).lower()])
    try:
        ts = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise JobValidationError(f"--older-than {value!r}: give an ISO timestamp or an age like 30d, 12h") from None
    return ts.astimezone(UTC).replace(tzinfo=None) if ts.tzinfo else ts


@click.group()
def archive() -> None:
    """Archived (succeeded) jobs."""


@archive.command("purge")
@click.option("--older-than", required=True, help="ISO timestamp, or an age such as 30d, 12h, 2w.")
@yes_option
@actor_option
@pass_ctx
@friendly_errors
def archive_purge(c: Ctx, older_than: str, yes: bool, actor: str) -> None:
    """Delete archived jobs finished before a time, in batches of Storage.CleanupBatchSize."""
    cutoff = parse_older_than(older_than)
    store = AdminStore(c.app.storage)
    # Counted in full: the purge reads every one of them anyway, and its progress bar needs the number.
    count = store.list_jobs(Location.ARCHIVE, JobFilter(to_utc=cutoff), page_size=1, exact_total=True).total
    if count == 0:
        click.echo(json.dumps({"deleted": 0, "older_than": cutoff.isoformat() + "Z"}))
        return
    if not yes:
        click.confirm(
            f"Delete about {count} archived job(s) finished before {cutoff.isoformat()}Z?", abort=True, err=True
        )
    with click.progressbar(length=count, label="Purging archive", file=sys.stderr) as bar:
        deleted = c.operations.purge_archive(_actor(actor), cutoff, progress=bar.update)
    click.echo(json.dumps({"deleted": deleted, "older_than": cutoff.isoformat() + "Z"}))
