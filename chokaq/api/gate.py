"""What every request passes before a route sees it: a pure ASGI middleware.

In this order, each step cheap before the next costly one:

1. ``Host`` is one the server answers to (when a list is configured): DNS rebinding.
2. A declared ``Content-Length`` over the limit is refused with 413 before anything is read.
3. A request with a body (and every mutating one) is authenticated before its body is read: an
   anonymous caller never makes the server buffer anything.
4. A mutating request is same-site: a JSON body, and a custom header (``Authorization`` or
   ``X-ChokaQ-Request``) or a same-origin ``Origin``/``Sec-Fetch-Site``. A cross-site page cannot
   send a custom header or a JSON content type without a CORS preflight, which is never granted.
   This matters where the browser holds the credential (an App Service sign-in cookie, or the
   open ``chokaq dev``): a bearer token is never sent by a browser on its own.
5. The body is read chunk by chunk and counted; past the limit it is 413 (chunked bodies too).
   Only then does the route run, on the buffered body, so memory per request is bounded by the
   limit, however large the body the client announces or sends.

Every response gets the security headers (:mod:`chokaq.api.headers`), the refusals here included.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from starlette.requests import Request

from chokaq.api.auth import Authenticator, AuthError
from chokaq.api.headers import security_headers
from chokaq.domain import limits

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CSRF_HEADER = "x-chokaq-request"
# Paths that take no credentials at all (probes); nothing there reads a body.
PUBLIC = frozenset({"/api/health"})


class Refusal(Exception):
    def __init__(self, status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail, self.headers = status, code, detail, headers or {}


def _host_only(value: str) -> str:
    """``example.com:8080`` -> ``example.com``; ``[::1]:7071`` -> ``::1``."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _origin_netloc(origin: str) -> str | None:
    scheme, sep, rest = origin.partition("://")
    if not sep or scheme not in ("http", "https") or not rest:
        return None
    return rest.split("/", 1)[0].lower()


class RequestGate:
    def __init__(
        self,
        app: ASGIApp,
        *,
        authenticator: Authenticator,
        max_body: int = limits.MAX_REQUEST_BYTES,
        allowed_hosts: Sequence[str] | None = None,
    ) -> None:
        self.app = app
        self.authenticator = authenticator
        self.max_body = max_body
        self.allowed_hosts = {_host_only(h) for h in allowed_hosts} if allowed_hosts else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                have = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k.encode(), v.encode()) for k, v in security_headers(path).items() if k.encode() not in have]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        try:
            replay = await self._check(scope, receive)
        except Refusal as r:
            await self._refuse(r, send_with_headers)
            return
        await self.app(scope, replay, send_with_headers)

    async def _check(self, scope: Scope, receive: Receive) -> Receive:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        method: str = scope.get("method", "GET").upper()
        if self.allowed_hosts is not None and _host_only(headers.get("host", "")) not in self.allowed_hosts:
            raise Refusal(400, "bad_host", "this server does not answer to that Host header")
        declared = headers.get("content-length")
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = 0
        if declared is not None:
            try:
                length = int(declared)
                if length < 0:
                    raise ValueError
            except ValueError:
                raise Refusal(400, "bad_request", "Content-Length is not a number") from None
        if length > self.max_body:
            raise Refusal(413, "too_large", f"the request body is {length} bytes; the limit is {self.max_body}")
        has_body = length > 0 or chunked
        if has_body and scope.get("path", "") in PUBLIC:
            # The one route anyone may call takes no body: reading one for an anonymous caller
            # would let it make the server buffer up to the limit per request.
            raise Refusal(413, "too_large", "this endpoint takes no request body")
        if (has_body or method in MUTATING) and scope.get("path", "") not in PUBLIC:
            try:
                self.authenticator.identify(Request(scope))
            except AuthError as exc:
                raise Refusal(
                    exc.status, exc.code, exc.detail, {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
                ) from None
        if method in MUTATING:
            self._same_site(headers, has_body)
        return await self._buffered(receive) if has_body else receive

    @staticmethod
    def _same_site(headers: dict[str, str], has_body: bool) -> None:
        ctype = headers.get("content-type")
        if has_body or ctype is not None:
            media = (ctype or "").split(";", 1)[0].strip().lower()
            if media != "application/json":
                raise Refusal(415, "unsupported_media_type", "send the body as JSON (Content-Type: application/json)")
        if "authorization" in headers or CSRF_HEADER in headers:
            return
        if headers.get("sec-fetch-site", "").lower() == "same-origin":
            return
        origin = headers.get("origin")
        if origin and _origin_netloc(origin) == headers.get("host", "").lower():
            return
        raise Refusal(
            403,
            "cross_site",
            "a change needs 'X-ChokaQ-Request: 1' (or Authorization), or must come from the API's own origin",
        )

    async def _buffered(self, receive: Receive) -> Receive:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise Refusal(400, "bad_request", "the client went away while sending the body")
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise Refusal(413, "too_large", f"the request body is over the limit of {self.max_body} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # disconnect detection for streaming responses

        return replay

    @staticmethod
    async def _refuse(r: Refusal, send: Send) -> None:
        body = json.dumps({"error": r.code, "detail": r.detail}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *((k.lower().encode(), v.encode()) for k, v in r.headers.items()),
        ]
        await send({"type": "http.response.start", "status": r.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
