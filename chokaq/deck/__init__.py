"""The Deck: the operator's web dashboard, static files served by the admin API at ``/deck``.

The Deck is plain HTML, CSS and JavaScript (no build step, no runtime Node). It talks only to the
admin API (``/api/...``) with the caller's credentials, so it can never do more than the API lets
that caller do; it merely hides the buttons a role may not use.
"""

from __future__ import annotations

import mimetypes
import os
from pathlib import Path

from fastapi import FastAPI, Response
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).parent / "static"
MOUNT_PATH = "/deck"

# The Deck is ES modules, which browsers run only when served with a JavaScript MIME type. Python
# guesses a type from the platform's tables first (the Windows registry, /etc/mime.types), and
# some map .js to text/plain: say it here so the Deck loads wherever the API runs.
mimetypes.add_type("text/javascript", ".js")


class DeckFiles(StaticFiles):
    """StaticFiles that answer 404 to paths the file system cannot even look up (``/deck/%00``
    raised ValueError: a 500 with a traceback)."""

    def lookup_path(self, path: str) -> tuple[str, os.stat_result | None]:
        if "\x00" in path:
            return "", None
        try:
            return super().lookup_path(path)
        except (ValueError, OSError):
            return "", None


def mount(api: FastAPI) -> None:
    """Serve the Deck at ``/deck/`` and redirect ``/`` and ``/deck`` there. Idempotent."""
    if any(getattr(r, "path", None) == MOUNT_PATH for r in api.router.routes):
        return

    async def root() -> Response:
        # A relative Location: Starlette's own slash redirect echoed the Host header back.
        return Response(status_code=307, headers={"Location": MOUNT_PATH + "/"})

    api.add_api_route("/", root, methods=["GET"], include_in_schema=False)
    api.add_api_route(MOUNT_PATH, root, methods=["GET"], include_in_schema=False)
    api.mount(MOUNT_PATH, DeckFiles(directory=STATIC_DIR, html=True), name="deck")


__all__ = ["MOUNT_PATH", "STATIC_DIR", "mount"]
