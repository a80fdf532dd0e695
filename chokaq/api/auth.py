"""Who is calling, and may they do this.

Identity comes from, in order:

1. App Service Authentication (Easy Auth), only when ``Admin.TrustAppServiceAuth`` is set: the
   platform strips any client-sent ``X-MS-CLIENT-PRINCIPAL`` and injects its own, so the header
   can be trusted there and nowhere else.
2. ``Authorization: Bearer <token>`` matched against ``Admin.Tokens``. Keys are the token itself
   or ``sha256:<hex digest>`` of it (prefer hashes wherever settings persist). Comparison is
   constant-time.
3. ``dev_open``: only ``chokaq dev`` on loopback passes it; anonymous callers are admins.

Anything else is anonymous: 401.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from chokaq.domain import limits
from chokaq.domain.errors import ConfigurationError
from chokaq.settings import AdminSettings

log = logging.getLogger("chokaq.api.auth")

VIEWER, OPERATOR, ADMIN = "viewer", "operator", "admin"
ROLE_RANK = {VIEWER: 1, OPERATOR: 2, ADMIN: 3}

# App role values (Entra ID app roles, group names mapped by the operator) -> our roles.
APP_ROLE_MAP = {
    "chokaq.admin": ADMIN,
    "chokaq.admins": ADMIN,
    "admin": ADMIN,
    "admins": ADMIN,
    "chokaq.operator": OPERATOR,
    "chokaq.operators": OPERATOR,
    "operator": OPERATOR,
    "operators": OPERATOR,
    "chokaq.viewer": VIEWER,
    "chokaq.viewers": VIEWER,
    "viewer": VIEWER,
    "viewers": VIEWER,
    "chokaq.reader": VIEWER,
    "reader": VIEWER,
}
PRINCIPAL_HEADER = "x-ms-client-principal"
PRINCIPAL_NAME_HEADER = "x-ms-client-principal-name"
DEV_ACTOR = "dev (open)"
MAX_PRINCIPAL_HEADER = 16 * 1024
MIN_TOKEN_LEN = 16


class AuthError(Exception):
    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail


@dataclass(frozen=True)
class Principal:
    name: str
    role: str
    via: str  # "app_service" | "token" | "dev_open"

    def allows(self, role: str) -> bool:
        return ROLE_RANK[self.role] >= ROLE_RANK[role]


@dataclass(frozen=True)
class _Token:
    key: str  # the plain token, or the hex sha256 digest
    hashed: bool
    name: str
    role: str


class Authenticator:
    def __init__(self, settings: AdminSettings, *, dev_open: bool = False) -> None:
        self.settings = settings
        self.dev_open = dev_open
        self.tokens = self._parse_tokens(settings.tokens, dev_open=dev_open)
        if settings.trust_app_service_auth:
            self._check_platform(settings)

    @staticmethod
    def _check_platform(settings: AdminSettings) -> None:
        """Trusting X-MS-CLIENT-PRINCIPAL is safe only where App Service strips the client's copy and
        injects its own; anywhere else a forged header makes anyone an admin. App Service sets
        WEBSITE_AUTH_ENABLED=True when its authentication is on."""
        if os.environ.get("WEBSITE_AUTH_ENABLED", "").strip().lower() == "true":
            return
        if not settings.trust_app_service_auth_unverified:
            raise ConfigurationError(
                "Admin.TrustAppServiceAuth is on, but WEBSITE_AUTH_ENABLED is not True: this does not look like "
                "App Service with Authentication enabled, and anyone reaching the app could forge "
                "X-MS-CLIENT-PRINCIPAL. Enable App Service Authentication, or (only behind a proxy of your own "
                "that strips and sets the header) set Admin.TrustAppServiceAuthUnverified"
            )
        log.warning(
            "!!! Admin.TrustAppServiceAuthUnverified: X-MS-CLIENT-PRINCIPAL is trusted WITHOUT App Service "
            "Authentication (WEBSITE_AUTH_ENABLED is not True). Anyone who reaches this app directly can "
            "claim any role. Make sure only your proxy can reach it. !!!"
        )

    @staticmethod
    def _parse_tokens(raw: dict[str, dict[str, str]], *, dev_open: bool = False) -> list[_Token]:
        out: list[_Token] = []
        for key, info in raw.items():
            role = str(info.get("role", "")).lower()
            name = str(info.get("name", "")).strip()
            if role not in ROLE_RANK:
                raise ConfigurationError(
                    f"Admin.Tokens: role {info.get('role')!r} is not one of viewer, operator, admin"
                )
            if not name or len(name) > limits.MAX_ACTOR_LEN:
                raise ConfigurationError(f"Admin.Tokens: each token needs a name of 1..{limits.MAX_ACTOR_LEN} chars")
            if key.lower().startswith("sha256:"):
                digest = key[7:].strip().lower()
                if len(digest) != 64 or any(ch not in "0123456789abcdef" for ch in digest):
                    raise ConfigurationError("Admin.Tokens: a sha256: key needs 64 hex digits")
                out.append(_Token(digest, True, name, role))
            else:
                if len(key) < MIN_TOKEN_LEN and not dev_open:
                    raise ConfigurationError(
                        f"Admin.Tokens: the token for {name} is shorter than {MIN_TOKEN_LEN} "
                        "characters; use a long random one (or its sha256: digest)"
                    )
                out.append(_Token(key, False, name, role))
        return out

    # ------------------------------------------------------------------ identify
    def identify(self, request: Request) -> Principal:
        headers = request.headers
        if self.settings.trust_app_service_auth and headers.get(PRINCIPAL_HEADER):
            return self._from_app_service(headers.get(PRINCIPAL_HEADER, ""), headers.get(PRINCIPAL_NAME_HEADER))
        auth = headers.get("authorization")
        if auth:
            scheme, _, token = auth.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise AuthError(401, "unauthenticated", "use 'Authorization: Bearer <token>'")
            return self._from_token(token.strip())
        if self.dev_open:
            return Principal(DEV_ACTOR, ADMIN, "dev_open")
        raise AuthError(401, "unauthenticated", "sign in: send 'Authorization: Bearer <token>'")

    def _from_token(self, token: str) -> Principal:
        digest = hashlib.sha256(token.encode("utf-8")).hexdigest()
        found: _Token | None = None
        for t in self.tokens:  # no early exit: timing does not reveal which entry matched
            ok = hmac.compare_digest(t.key.encode(), (digest if t.hashed else token).encode("utf-8"))
            if ok and found is None:
                found = t
        if found is None:
            raise AuthError(401, "unauthenticated", "unknown bearer token")
        return Principal(found.name, found.role, "token")

    def _from_app_service(self, raw: str, name_header: str | None) -> Principal:
        # The header is the platform's when the app sits behind App Service, but anything that
        # reaches the app directly can send one: every malformed shape is a 401, never a 500.
        def refuse(why: str) -> AuthError:
            return AuthError(401, "unauthenticated", f"X-MS-CLIENT-PRINCIPAL {why}")

        if len(raw) > MAX_PRINCIPAL_HEADER:
            raise refuse(f"is longer than {MAX_PRINCIPAL_HEADER} characters")
        try:
            data: Any = json.loads(base64.b64decode(raw + "=" * (-len(raw) % 4)))
        except (binascii.Error, ValueError, RecursionError):
            raise refuse("is not base64 JSON") from None
        if not isinstance(data, dict):
            raise refuse("is not a JSON object")
        raw_claims = data.get("claims") or []
        if not isinstance(raw_claims, list):
            raise refuse("claims is not a list")
        name_typ, role_typ = data.get("name_typ"), data.get("role_typ")
        if not isinstance(name_typ, str | None) or not isinstance(role_typ, str | None):
            raise refuse("name_typ and role_typ must be strings")
        # Only claims shaped {"typ": str, "val": str} count; anything else is ignored.
        claims = [
            (c["typ"], c["val"])
            for c in raw_claims
            if isinstance(c, dict) and isinstance(c.get("typ"), str) and isinstance(c.get("val"), str)
        ]
        role_types = {t for t in (role_typ, self.settings.app_service_role_claim) if t}
        name = (
            next((val.strip() for typ, val in claims if name_typ and typ == name_typ and val.strip()), None)
            or (name_header or "").strip()
        )
        if not name:
            raise AuthError(401, "unauthenticated", "the App Service principal has no name claim")
        best: str | None = None
        for typ, val in claims:
            if typ not in role_types:
                continue
            role = APP_ROLE_MAP.get(val.strip().lower())
            if role is not None and (best is None or ROLE_RANK[role] > ROLE_RANK[best]):
                best = role
        if best is None:
            raise AuthError(
                403,
                "forbidden",
                f"{name[: limits.MAX_ACTOR_LEN]} is signed in but holds no chokaq role "
                "(chokaq.viewer, chokaq.operator or chokaq.admin)",
            )
        return Principal(name[: limits.MAX_ACTOR_LEN], best, "app_service")


def require(role: str) -> Callable[[Request], Principal]:
    """A FastAPI dependency: the caller, who must hold at least ``role``."""

    def dependency(request: Request) -> Principal:
        auth: Authenticator = request.app.state.authenticator
        who = auth.identify(request)
        if not who.allows(role):
            raise AuthError(403, "forbidden", f"{who.name} is {who.role}; this needs {role}")
        request.state.principal = who
        return who

    dependency.__name__ = f"require_{role}"
    return dependency


def hash_token(token: str) -> str:
    """The ``sha256:<hex>`` key to put in Admin.Tokens instead of the token itself."""
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()
