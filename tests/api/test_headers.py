"""Security headers on the API and the Deck, and no third-party code on the Deck's origin."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from chokaq.deck import STATIC_DIR
from tests.api.helpers import HEADERS


def _secure(headers: dict[str, str] | object) -> None:
    h = {k.lower(): v for k, v in dict(headers).items()}  # type: ignore[call-overload]
    csp = h["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert h["x-content-type-options"] == "nosniff"
    assert h["x-frame-options"] == "DENY"
    assert h["referrer-policy"] == "no-referrer"


def test_api_json_is_never_cached_and_carries_the_headers(client: TestClient) -> None:
    for path, headers in (
        ("/api/stats", HEADERS["viewer"]),
        ("/api/jobs", HEADERS["viewer"]),
        ("/api/stats", {}),
        ("/api/health", {}),
    ):
        r = client.get(path, headers=headers)
        _secure(r.headers)
        assert r.headers["cache-control"] == "no-store", path
    # Refusals made before any route runs get them too.
    r = client.post("/api/jobs", headers={"Content-Type": "application/json", "Content-Length": "999999999"})
    assert r.status_code == 413
    _secure(r.headers)


def test_the_deck_is_served_under_the_policy(client: TestClient) -> None:
    r = client.get("/deck/")
    assert r.status_code == 200
    _secure(r.headers)
    for name in ("main.js", "views/lists.js", "deck.css"):
        _secure(client.get(f"/deck/{name}").headers)


def test_the_deck_has_no_inline_script_or_style() -> None:
    html = (STATIC_DIR / "index.html").read_text()
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert "src=" in tag, tag
    assert not re.search(r"<script\b[^>]*>\s*[^<\s]", html), "inline script"
    assert not re.search(r"<style\b", html) and not re.search(r"\sstyle=", html)
    assert not re.search(r"\son[a-z]+\s*=", html), "inline event handler"
    modules = [p for p in STATIC_DIR.rglob("*.js") if "vendor" not in p.parts]
    assert len(modules) > 1  # the Deck's ES modules (main.js and what it imports)
    for path in modules:
        js = path.read_text()
        assert "innerHTML" not in js.replace("(never innerHTML)", "") and "eval(" not in js, path.name
        assert not re.search(r"setAttribute\(\s*[\"']style", js), path.name


def test_no_cdn_documentation_pages(client: TestClient) -> None:
    assert client.get("/docs").status_code == 404
    assert client.get("/redoc").status_code == 404
    assert client.get("/docs/oauth2-redirect").status_code == 404
    r = client.get("/openapi.json")
    assert r.status_code == 200 and r.json()["info"]["title"] == "chokaq admin API"
