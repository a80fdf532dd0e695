"""Security headers on every response of the admin API and the Deck.

The Deck is same-origin static files and ``fetch`` calls, with no inline script or style, so a
strict policy costs it nothing: anything injected into a page could run no script, load nothing
from elsewhere and send nothing elsewhere, and no other site can frame the Deck (clickjacking of
Purge).
"""

from __future__ import annotations

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
    "connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

ALWAYS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}


def security_headers(path: str) -> dict[str, str]:
    """Headers to add to a response for ``path`` (existing ones of the same name are kept)."""
    out = dict(ALWAYS)
    if path.startswith("/api/") or path == "/openapi.json":
        # Job data and who-may-do-what must not sit in browser or proxy caches.
        out["cache-control"] = "no-store"
        out["pragma"] = "no-cache"
    return out
