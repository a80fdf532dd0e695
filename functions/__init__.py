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
  for at most ``CHOKAQ_DRAIN_SECONDS`` per tick, then stops gracefully (see docs/functions.md).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

import azure.functions as func

from chokaq import telemetry
from chokaq.cli.loading import load_app
from chokaq.runtime.app import ChokaQ

log = logging.getLogger("chokaq.functions")

# Read here only (not by the engine); they configure the optional drain timer.
DRAIN_ENV_NAMES = ["CHOKAQ_DRAIN_SCHEDULE", "CHOKAQ_DRAIN_SECONDS", "CHOKAQ_DRAIN_IDLE_SECONDS"]


def build_function_app(chokaq_app: ChokaQ | None = None, *,
                       environ: Mapping[str, str] = os.environ) -> func.AsgiFunctionApp:
    from functions import api, drain, timers

    telemetry.configure("chokaq-functions")
    app = chokaq_app if chokaq_app is not None else load_app(environ.get("CHOKAQ_APP"))
    fa = api.asgi_function_app(app, environ)
    fa.register_functions(timers.blueprint(app))
    schedule = environ.get("CHOKAQ_DRAIN_SCHEDULE")
    if schedule:
        if app.handlers:
            fa.register_functions(drain.blueprint(app, environ))
        else:
            log.warning("CHOKAQ_DRAIN_SCHEDULE is set but the app has no handlers (set CHOKAQ_APP): no drain")
    return fa
