"""The admin API as one catch-all HTTP function.

``func.AsgiFunctionApp`` registers ``http_app_func`` on the route ``/{*route}``; with
``extensions.http.routePrefix: ""`` in host.json the FastAPI app sees ``/api/...`` paths unchanged.
Responses are buffered by the Functions host, so ``GET /api/events`` answers with the buffered
events and one stats tick and ends there; the Deck polls ``/api/events/recent`` instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import azure.functions as func

from chokaq.api import create_api
from chokaq.runtime.app import ChokaQ

AUTH_LEVELS = {
    "FUNCTION": func.AuthLevel.FUNCTION,
    "ANONYMOUS": func.AuthLevel.ANONYMOUS,
    "ADMIN": func.AuthLevel.ADMIN,
}


def auth_level(environ: Mapping[str, str] = os.environ) -> func.AuthLevel:
    """CHOKAQ_FUNCTIONS_AUTH_LEVEL: FUNCTION (default: a function key is needed on top of chokaq's own
    auth) or ANONYMOUS (behind App Service Authentication, which then does the gatekeeping)."""
    raw = (environ.get("CHOKAQ_FUNCTIONS_AUTH_LEVEL") or "FUNCTION").strip().upper()
    if raw not in AUTH_LEVELS:
        raise ValueError(f"CHOKAQ_FUNCTIONS_AUTH_LEVEL={raw!r}: use FUNCTION, ANONYMOUS or ADMIN")
    return AUTH_LEVELS[raw]


def asgi_function_app(app: ChokaQ, environ: Mapping[str, str] = os.environ) -> func.AsgiFunctionApp:
    """The root FunctionApp: the admin API; the timers are registered on it as blueprints."""
    return func.AsgiFunctionApp(app=create_api(app), http_auth_level=auth_level(environ), function_name="http_app_func")
