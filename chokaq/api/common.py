"""Helpers shared by the route modules: state access (the app, its admin store, its operations
service), id and payload checks."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request
from pydantic import ValidationError

from chokaq.api.auth import ADMIN, OPERATOR, VIEWER, AuthError, Principal, require
from chokaq.api.models import ErrorOut, FieldError, _PayloadEdit
from chokaq.domain import limits
from chokaq.domain.errors import NotFoundError
from chokaq.domain.models import check_payload_text, encode_payload
from chokaq.operations.service import Operations
from chokaq.runtime.app import ChokaQ
from chokaq.storage import Actor, AdminStore, FiguresCache

Viewer = Annotated[Principal, Depends(require(VIEWER))]
Operator = Annotated[Principal, Depends(require(OPERATOR))]
Admin = Annotated[Principal, Depends(require(ADMIN))]

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "not signed in"},
    403: {"model": ErrorOut, "description": "role too low"},
    422: {"model": ErrorOut, "description": "invalid input; field errors in detail"},
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorOut, "description": "no such job"}}
CONFLICT: dict[int | str, dict[str, Any]] = {409: {"model": ErrorOut, "description": "state does not allow it"}}


class PayloadInvalid(Exception):
    """A payload the handler's model (or JSON itself) refuses: 422 with field errors."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(e.msg for e in errors))
        self.errors = errors


def chokaq_app(request: Request) -> ChokaQ:
    app: ChokaQ = request.app.state.chokaq
    return app


def admin_store(request: Request) -> AdminStore:
    store: AdminStore = request.app.state.admin_store
    return store


def figures(request: Request) -> FiguresCache:
    cache: FiguresCache = request.app.state.figures
    return cache


def operations(request: Request) -> Operations:
    ops: Operations = request.app.state.operations
    return ops


def actor(who: Principal) -> Actor:
    return Actor(who.name[: limits.MAX_ACTOR_LEN], who.role)


def check_job_id(job_id: str) -> str:
    if not job_id or len(job_id) > limits.MAX_JOB_ID_LEN or "\x00" in job_id:
        raise NotFoundError(f"no job {job_id[:60]!r}")
    return job_id


def field_errors(exc: ValidationError, prefix: tuple[str | int, ...]) -> list[FieldError]:
    return [
        FieldError(
            loc=[*prefix, *(p for p in e["loc"] if isinstance(p, int) or "function" not in p)],
            msg=e["msg"],
            type=e["type"],
        )
        for e in exc.errors(include_url=False)
    ]


def edited_payload(app: ChokaQ, job_type: str, body: _PayloadEdit, who: Principal) -> str | None:
    """The new payload text of an edit, checked: JSON, size, and the handler's model unless forced."""
    if body.force and not who.allows(ADMIN):
        raise AuthError(403, "forbidden", f"{who.name} is {who.role}; force needs admin")
    if not body.has_payload():
        return None
    field = "payload_text" if body.payload_text is not None else "payload"
    try:
        text = check_payload_text(body.payload_text) if body.payload_text is not None else encode_payload(body.payload)
    except ValueError as exc:  # JobValidationError, or text that is not valid Unicode
        raise PayloadInvalid([FieldError(loc=["body", field], msg=str(exc), type="payload")]) from None
    handler = app.handlers.get(job_type)
    if handler is not None and handler.payload_model is not None and not body.force:
        try:
            handler.payload_model.model_validate_json(text)
        except ValidationError as exc:
            raise PayloadInvalid(field_errors(exc, ("body", field))) from None
    return text
