"""Secrets out of messages: every settings, URL and startup error passes through :func:`redact`
before it is printed or logged."""

from __future__ import annotations

import json
import os
import re

# scheme://user:PASSWORD@host  (the user name stays: it helps, and is not a secret)
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:/?#@\s'\"]*:)[^@\s'\"]*@")
# user:PASSWORD@host where the URL does not parse (``postgresql+psycopg//u:pw@h``, a missing
# scheme, a stray space): a word's "name:" then anything up to its last "@". It starts after a
# space, quote, slash, bracket, comma or "=", and the "//" of a real URL is left to the pattern above.
_USERINFO = re.compile(r"(?P<head>(?<![^\s/'\"(,=])[^\s:/@'\"]*:)(?!//)(?!\*\*\*@)[^\s'\"]+@")
# key=value secrets in ODBC strings and URL queries: PWD=..., Password=..., AccountKey=..., token=...,
# also percent-encoded inside a URL (odbc_connect=...%3BPWD%3D...%3B)
_KEY_VALUE = re.compile(
    r"(?P<key>(?:(?<=%3B)|(?<=%26)|\b)(?:pwd|password|passwd|accountkey|sharedaccesskey|sig|token|access_token|secret|"
    r"client_secret)\s*(?:=|%3D)\s*)(?P<value>\{[^}]*\}|(?:(?!%3B|%26)[^;&\s'\"])+)",
    re.IGNORECASE,
)
MASK = "***"


def _env_tokens() -> list[str]:
    """The admin tokens configured in the environment, when they parse (they are the secrets a
    malformed settings message would otherwise echo)."""
    raw = os.environ.get("CHOKAQ_ADMIN__TOKENS")
    if not raw:
        return []
    try:
        data = json.loads(raw)
    except ValueError:
        return []
    keys = data.keys() if isinstance(data, dict) else []
    return [k for k in keys if isinstance(k, str) and len(k) >= 4 and not k.lower().startswith("sha256:")]


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    # Each pattern only where it can match (a URL has "://", a pair "="): job log lines pass here
    # one by one, and most have neither.
    out = _URL_PASSWORD.sub(lambda m: m.group("head") + MASK + "@", text) if "://" in text else text
    if "@" in out and ":" in out:
        out = _USERINFO.sub(lambda m: m.group("head") + MASK + "@", out)
    if "=" in out or "%3" in out:
        out = _KEY_VALUE.sub(lambda m: m.group("key") + MASK, out)
    for secret in sorted({*secrets, *_env_tokens()}, key=len, reverse=True):
        if secret:
            out = out.replace(secret, MASK)
    return out
