"""Fixtures for the Deck's browser tests: headless Chromium, a real admin API server and a worker.

The browser tests skip (saying why) when /usr/bin/chromium is missing, unless
CHOKAQ_REQUIRE_BROWSER=1, which CI sets: then they fail instead.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from chokaq import ChokaQ, JobContext

CHROMIUM = os.environ.get("CHOKAQ_TEST_CHROMIUM", "/usr/bin/chromium")
REQUIRE_BROWSER = os.environ.get("CHOKAQ_REQUIRE_BROWSER") == "1"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-output" / "screenshots"
VIEWER_TOKEN = "viewer-token-for-the-deck-tests"
OPERATOR_TOKEN = "operator-token-for-the-deck-tests"


def require_browser() -> None:
    problem = None
    if not Path(CHROMIUM).exists():
        problem = f"Chromium not found at {CHROMIUM}"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError as exc:  # pragma: no cover - depends on the machine
            problem = f"playwright is not installed: {exc}"
    if problem is None:
        return
    if REQUIRE_BROWSER:
        pytest.fail(problem + " (CHOKAQ_REQUIRE_BROWSER=1)")
    pytest.skip(problem + "; install chromium (apt-get install chromium) or set CHOKAQ_TEST_CHROMIUM")


# Module scope: a live sync_playwright keeps an event loop running in the main thread, which
# would break asyncio.run() in tests that come after this module.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(autouse=True)
def _expect_timeout() -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=15_000)


class Email(BaseModel):
    to: str = Field(pattern=r"^[^@\s]+@[^@\s]+$", description="recipient address")
    subject: str = Field(min_length=1)
    body: str = ""


def build_app(db_url: str) -> ChokaQ:
    app = ChokaQ(storage_url=db_url)
    app.settings.storage.polling_interval = 0.2
    app.settings.storage.idle_polling_interval = 0.2
    app.settings.admin.event_poll_interval = 0.5
    app.settings.admin.tokens = {
        VIEWER_TOKEN: {"name": "vera", "role": "viewer"},
        OPERATOR_TOKEN: {"name": "otto", "role": "operator"},
    }

    @app.job("email_v1", queue="notifications", payload=Email)
    async def send_email(email: Email, ctx: JobContext) -> None:
        return None

    @app.job("noop_v1")
    def noop(payload: object) -> None:
        return None

    return app


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """uvicorn in a background thread on a free loopback port."""

    def __init__(self, api: Any) -> None:
        import uvicorn

        self.port = _free_port()
        config = uvicorn.Config(api, host="127.0.0.1", port=self.port, log_level="warning", timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"deck-api-{self.port}", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test API server did not start")
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def serve(app: ChokaQ, *, dev_open: bool) -> Server:
    from fastapi.testclient import TestClient

    from chokaq.api.app import create_api
    from chokaq.deck import mount

    api = create_api(app, dev_open=dev_open)
    if TestClient(api).get("/deck/").status_code == 404:  # create_api may already mount the Deck
        mount(api)
    return Server(api)


@dataclass
class DeckEnv:
    app: ChokaQ
    url: str  # dev_open: anonymous callers are admins (the `chokaq dev` setting)
    auth_url: str  # tokens required: the viewer signs in here
    db: str


@pytest.fixture
def deck(db_url: str) -> Iterator[DeckEnv]:
    app = build_app(db_url)
    app.storage.upgrade()
    worker = app.worker(queues=["notifications", "default"], concurrency=2, worker_id="deck-test-worker")
    wt = threading.Thread(target=worker.run, kwargs={"install_signals": False}, name="deck-worker", daemon=True)
    wt.start()
    open_server = serve(app, dev_open=True)
    auth_server = serve(app, dev_open=False)
    try:
        db = "postgres" if db_url.startswith("postgresql") else "sqlite"
        yield DeckEnv(app, open_server.url, auth_server.url, db)
    finally:
        open_server.stop()
        auth_server.stop()
        worker.stop()
        wt.join(15)
        app.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    # The API's Content-Security-Policy must leave the Deck fully working: Chromium reports every
    # blocked script, style, image or connection as a console error naming the policy.
    violations: list[str] = []
    pg.on(
        "console",
        lambda msg: (
            violations.append(msg.text) if msg.type == "error" and "Content Security Policy" in msg.text else None
        ),
    )
    try:
        yield pg
    finally:
        context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"
    assert not violations, f"CSP violations on the page: {violations}"


def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path
