"""What the Functions app registers when its configuration is refused at indexing.

A deployed package must not quietly fall back to ``sqlite:///./chokaq.db`` in its own directory
and answer ``ok`` to health checks while every job goes to a throw-away file. Instead every HTTP
route answers 503 with the reason, and the timers fail each run with it, so the host's invocation
log and any health probe say what is wrong.
"""

from __future__ import annotations

import json

import azure.functions as func

from chokaq.domain.errors import ConfigurationError


def function_app(reason: str, auth_level: func.AuthLevel) -> func.FunctionApp:
    fa = func.FunctionApp(http_auth_level=auth_level)

    @fa.function_name("http_app_func")
    @fa.route(route="/{*route}", methods=None)
    def refuse(req: func.HttpRequest) -> func.HttpResponse:
        body = {"status": "unavailable", "db": "not configured", "error": reason}
        return func.HttpResponse(json.dumps(body), status_code=503, mimetype="application/json")

    for name, setting in (("sweep", "CHOKAQ_SWEEP_SCHEDULE"), ("retention", "CHOKAQ_RETENTION_SCHEDULE")):
        fa.register_functions(_failing_timer(name, setting, reason))
    return fa


def _failing_timer(name: str, setting: str, reason: str) -> func.Blueprint:
    bp = func.Blueprint()  # type: ignore[no-untyped-call]

    @bp.function_name(name)
    @bp.timer_trigger(arg_name="timer", schedule=f"%{setting}%", run_on_startup=False, use_monitor=False)
    def timer(timer: func.TimerRequest) -> None:
        raise ConfigurationError(reason)

    return bp
