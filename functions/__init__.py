"""The chokaq Azure Functions app, assembled from blueprints.

``function_app.py`` (the Functions entry point) calls :func:`build_function_app`. Tests call it
with their own :class:`ChokaQ` app and invoke the registered functions directly.

Functions:

* ``http_app_func``: the admin API (FastAPI through ``AsgiFunctionApp``), every ``/api/...`` route;
* ``sweep``: the recovery sweep on ``%CHOKAQ_SWEEP_SCHEDULE%`` (abandoned reservations back to
  Pending, expired heartbeats to the DLQ);
* ``retention``: archive rows older than ``Retention.ArchiveDays`` deleted in bounded batches, on
  ``%CHOKAQ_RETENTION_SCHEDULE%``;
* ``drain``: only when ``CHOKAQ_DRAIN_SCHEDULE`` is set and the app has handlers: a worker that runs
  for at most ``CHOKAQ_DRAIN_SECONDS`` per tick, then stops gracefully (see docs/functions.md);
* ``wake``: only when ``CHOKAQ_FUNCTIONS__DOORBELL_QUEUE`` is set and the app has handlers: the same
  slice, started by a doorbell message that a producer sends after its enqueue commits.

With the doorbell queue set, this app's own enqueues (the admin API) ring it too.

A missing ``CHOKAQ_STORAGE_URL`` (or another refused setting) does not fall back to a SQLite file in
the package: the app then registers only functions that report the reason (functions/misconfigured.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

import azure.functions as func

from chokaq import telemetry
from chokaq.domain.errors import ConfigurationError
from chokaq.loading import load_app
from chokaq.runtime.app import ChokaQ
from chokaq.settings import DEFAULT_STORAGE_URL

log = logging.getLogger("chokaq.functions")

# Read here only (not by the engine); they configure the optional drain timer.
DRAIN_ENV_NAMES = ["CHOKAQ_DRAIN_SCHEDULE", "CHOKAQ_DRAIN_SECONDS", "CHOKAQ_DRAIN_IDLE_SECONDS"]


def build_function_app(
    chokaq_app: ChokaQ | None = None, *, environ: Mapping[str, str] = os.environ
) -> func.FunctionRegister:
    from functions import api, misconfigured

    telemetry.configure("chokaq-functions")
    try:
        app = chokaq_app if chokaq_app is not None else load_configured_app(environ)
        return _assemble(app, environ)
    except (ConfigurationError, ValueError) as exc:
        log.error("chokaq Functions app refused its configuration: %s", exc)
        try:
            level = api.auth_level(environ)
        except ValueError:
            level = func.AuthLevel.FUNCTION
        return misconfigured.function_app(str(exc), level)


def _assemble(app: ChokaQ, environ: Mapping[str, str]) -> func.FunctionRegister:
    from functions import api, doorbell, drain, timers, wake

    fa = api.asgi_function_app(app, environ)
    fa.register_functions(timers.blueprint(app))
    wanted = {
        "drain": (environ.get("CHOKAQ_DRAIN_SCHEDULE") or "").strip(),
        "wake": app.settings.functions.doorbell_queue,
    }
    slices: drain.Slices | None = None
    for setting, name, make in (
        ("CHOKAQ_DRAIN_SCHEDULE", "drain", drain.blueprint),
        (doorbell.QUEUE_SETTING, "wake", wake.blueprint),
    ):
        if not wanted[name]:
            continue
        if not app.handlers:
            # CHOKAQ_APP empty is the documented bare app (the example settings ship so): DEBUG. Set
            # to a module without handlers, it is a mistake worth a WARNING at every start.
            level = logging.WARNING if (environ.get("CHOKAQ_APP") or "").strip() else logging.DEBUG
            log.log(level, "%s is set but the app has no handlers (set CHOKAQ_APP): no %s", setting, name)
            continue
        slices = slices or drain.slices_for(app, environ)  # one slice per process for both triggers
        fa.register_functions(make(slices))
    doorbell.install(app, environ)  # last: nothing rings for an app that was refused
    return fa


def load_configured_app(environ: Mapping[str, str] = os.environ) -> ChokaQ:
    """The ``CHOKAQ_APP`` app, refused when its database would be the implicit SQLite fallback."""
    app = load_app(environ.get("CHOKAQ_APP"))
    url = (app.settings.storage_url or "").strip()
    if not url or (url == DEFAULT_STORAGE_URL and not (environ.get("CHOKAQ_STORAGE_URL") or "").strip()):
        app.close()
        raise ConfigurationError(
            "CHOKAQ_STORAGE_URL is not set: set it to the chokaq database's SQLAlchemy URL (the Functions "
            "app does not fall back to a SQLite file inside its package)"
        )
    return app
