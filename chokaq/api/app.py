"""The admin API (FastAPI): what the Deck, scripts and the Functions app call."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from chokaq import __version__
from chokaq.api import (
    events,
    routes_breakers,
    routes_dlq,
    routes_history,
    routes_jobs,
    routes_meta,
    routes_queues,
    routes_schedules,
    routes_system,
    routes_workers,
)
from chokaq.api.auth import Authenticator, AuthError
from chokaq.api.common import PayloadInvalid
from chokaq.api.gate import RequestGate
from chokaq.domain.errors import ConflictError, JobValidationError, NotFoundError
from chokaq.operations.service import Operations
from chokaq.redact import redact
from chokaq.runtime.app import ChokaQ
from chokaq.storage import AdminStore, FiguresCache

log = logging.getLogger("chokaq.api")

HTTP_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "too_large",
    415: "unsupported_media_type",
    429: "too_many_requests",
}


def _error(status: int, code: str, detail: Any, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": code, "detail": detail}, status_code=status, headers=headers)


def clean_loc(loc: Any) -> list[str | int]:
    """A field path without pydantic's union-member tags: those name validator functions (e.g.
    ``function-after[functools.partial(<function max_length_validator at 0x7f…>)]``), which
    say nothing to a caller and leak the server's memory layout."""
    return [p for p in loc if isinstance(p, int) or ("function" not in p and " at 0x" not in p)]


def _field_errors(errors: Any) -> list[dict[str, Any]]:
    return [
        {"loc": clean_loc(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", "value_error"))}
        for e in errors
    ]


def install_error_handlers(api: FastAPI) -> None:
    async def auth_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, AuthError)
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return _error(exc.status, exc.code, exc.detail, headers)

    async def request_invalid(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError | ValidationError)
        return _error(422, "validation_error", _field_errors(exc.errors()))

    async def payload_invalid(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, PayloadInvalid)
        return _error(422, "payload_invalid", [e.model_dump() for e in exc.errors])

    async def job_invalid(_: Request, exc: Exception) -> JSONResponse:
        return _error(422, "invalid", str(exc))

    async def not_found(_: Request, exc: Exception) -> JSONResponse:
        return _error(404, "not_found", str(exc))

    async def conflict(_: Request, exc: Exception) -> JSONResponse:
        return _error(409, "conflict", str(exc))

    async def http_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return _error(
            exc.status_code,
            HTTP_CODES.get(exc.status_code, "http_error"),
            str(exc.detail),
            dict(exc.headers) if exc.headers else None,
        )

    async def db_error(_: Request, exc: Exception) -> JSONResponse:
        log.error("database error: %s", redact(str(exc).splitlines()[0]) if str(exc) else type(exc).__name__)
        return _error(503, "db_unavailable", "the database is unavailable or refused the request")

    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error in the admin API", exc_info=exc)
        return _error(500, "internal", "internal error; see the server log")

    api.add_exception_handler(AuthError, auth_error)
    api.add_exception_handler(RequestValidationError, request_invalid)
    api.add_exception_handler(ValidationError, request_invalid)
    api.add_exception_handler(PayloadInvalid, payload_invalid)
    api.add_exception_handler(JobValidationError, job_invalid)
    api.add_exception_handler(NotFoundError, not_found)
    api.add_exception_handler(ConflictError, conflict)
    api.add_exception_handler(StarletteHTTPException, http_error)
    api.add_exception_handler(OperationalError, db_error)
    api.add_exception_handler(DBAPIError, db_error)
    api.add_exception_handler(Exception, unexpected)


def create_api(chokaq_app: ChokaQ, *, dev_open: bool = False, allowed_hosts: Sequence[str] | None = None) -> FastAPI:
    """Build the admin API over ``chokaq_app``'s storage and handlers.

    ``dev_open=True`` makes anonymous callers admins. Only ``chokaq dev`` on 127.0.0.1 passes it.
    ``allowed_hosts`` (with ``Admin.AllowedHosts``) are the ``Host`` values answered; others get 400.
    """
    authenticator = Authenticator(chokaq_app.settings.admin, dev_open=dev_open)
    api = FastAPI(
        title="chokaq admin API",
        version=__version__,
        description="Operator API for chokaq: stats, queues, jobs, the DLQ workflow (inspect, edit, "
        'resurrect, purge), audit and live events. Errors are {"error": code, "detail": ...}.',
        # Swagger UI and ReDoc load their code from a CDN: never on the Deck's origin.
        docs_url=None,
        redoc_url=None,
    )
    hosts = [*(allowed_hosts or ()), *chokaq_app.settings.admin.allowed_hosts]
    api.add_middleware(RequestGate, authenticator=authenticator, allowed_hosts=hosts or None)
    api.state.chokaq = chokaq_app
    api.state.admin_store = AdminStore(chokaq_app.storage, count_cap=chokaq_app.settings.admin.exact_count_limit)
    admin = chokaq_app.settings.admin
    api.state.figures = FiguresCache(
        chokaq_app.storage, exact_limit=admin.exact_count_limit, max_age=admin.large_count_max_age
    )
    api.state.operations = Operations(chokaq_app, api.state.admin_store)
    api.state.authenticator = authenticator
    api.state.dev_open = dev_open
    install_error_handlers(api)
    for module in (
        routes_system,
        routes_meta,
        routes_history,
        routes_queues,
        routes_schedules,
        routes_breakers,
        routes_workers,
        routes_jobs,
        routes_dlq,
        events,
    ):
        api.include_router(module.router)
    from chokaq.deck import mount as mount_deck

    mount_deck(api)
    if dev_open:
        log.warning("!!! chokaq admin API is OPEN: anyone who can reach it is an admin (dev mode) !!!")
    elif not authenticator.tokens and not chokaq_app.settings.admin.trust_app_service_auth:
        log.warning(
            "chokaq admin API has no tokens and does not trust App Service auth: every call but "
            "/api/health will be refused (set CHOKAQ_ADMIN__TOKENS)"
        )
    return api
