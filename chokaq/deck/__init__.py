"""The Deck: the operator's web dashboard, static files served by the admin API at ``/deck``.

The Deck is plain HTML, CSS and JavaScript (no build step, no runtime Node). It talks only to the
admin API (``/api/...``) with the caller's credentials, so it can never do more than the API lets
that caller do; it merely hides the buttons a role may not use.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).parent / "static"
MOUNT_PATH = "/deck"


def mount(api: FastAPI) -> None:
    """Serve the Deck at ``/deck/`` and redirect ``/`` there. Idempotent."""
    if any(getattr(r, "path", None) == MOUNT_PATH for r in api.router.routes):
        return

    async def root() -> RedirectResponse:
        return RedirectResponse(url=MOUNT_PATH + "/", status_code=307)

    api.add_api_route("/", root, methods=["GET"], include_in_schema=False)
    api.mount(MOUNT_PATH, StaticFiles(directory=STATIC_DIR, html=True), name="deck")


__all__ = ["MOUNT_PATH", "STATIC_DIR", "mount"]
