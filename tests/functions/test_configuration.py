"""The Functions app's configuration: a missing CHOKAQ_STORAGE_URL is refused (no SQLite file in the
package, /api/health not "ok"), and the drain's time box honours the functionTimeout app setting."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest
from azure.functions.timer import TimerRequest

from chokaq import ChokaQ
from chokaq.domain.errors import ConfigurationError
from chokaq.settings import setting_env_names
from functions import build_function_app
from functions.drain import drain_budget, function_timeout, slices_of

ROOT = Path(__file__).resolve().parents[2]


def functions_of(fa: Any) -> dict[str, Any]:
    return {f.get_function_name(): f.get_user_function() for f in fa.get_functions()}


def get(path: str) -> func.HttpRequest:
    return func.HttpRequest(
        method="GET",
        url=f"http://localhost:7071{path}",
        headers={},
        params={},
        route_params={"route": path.lstrip("/")},
        body=b"",
    )


async def call(handler: Any, req: func.HttpRequest) -> func.HttpResponse:
    result = handler(req) if not asyncio.iscoroutinefunction(handler) else await handler(req, None)
    response: func.HttpResponse = result
    return response


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    for name in [*setting_env_names(), "CHOKAQ_APP"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # where the old fallback sqlite:///./chokaq.db would have appeared
    sys.modules.pop("function_app", None)
    try:
        yield tmp_path
    finally:
        sys.modules.pop("function_app", None)


def test_missing_storage_url_is_refused_and_health_is_not_ok(clean_env: Path) -> None:
    module = importlib.import_module("function_app")  # indexing, as the worker does it
    fns = functions_of(module.app)
    assert set(fns) == {"http_app_func", "sweep", "retention"}
    for path in ("/api/health", "/api/stats"):
        r = asyncio.run(call(fns["http_app_func"], get(path)))
        assert r.status_code == 503, (path, r.get_body())
        body = json.loads(r.get_body())
        assert body["status"] != "ok" and "CHOKAQ_STORAGE_URL is not set" in body["error"]
    with pytest.raises(ConfigurationError, match="CHOKAQ_STORAGE_URL is not set"):
        fns["sweep"](TimerRequest())
    assert not (clean_env / "chokaq.db").exists()


def test_empty_storage_url_is_refused_too(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHOKAQ_STORAGE_URL", "  ")
    fa = build_function_app(environ={"CHOKAQ_STORAGE_URL": "  "})
    r = asyncio.run(call(functions_of(fa)["http_app_func"], get("/api/health")))
    assert r.status_code == 503 and "CHOKAQ_STORAGE_URL" in json.loads(r.get_body())["error"]


def test_a_malformed_storage_url_is_refused_without_its_password(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    password = "S3cretPW-77"
    url = f"postgresql+psycopg//app:{password}@db.example/app"
    monkeypatch.setenv("CHOKAQ_STORAGE_URL", url)
    fa = build_function_app(environ={"CHOKAQ_STORAGE_URL": url})
    fns = functions_of(fa)
    r = asyncio.run(call(fns["http_app_func"], get("/api/health")))
    body = r.get_body().decode()
    assert r.status_code == 503 and "app:***@db.example" in body and password not in body
    with pytest.raises(ConfigurationError) as err:
        fns["sweep"](TimerRequest())
    assert password not in str(err.value)
    assert "refused its configuration" in caplog.text and password not in caplog.text


def test_a_set_storage_url_serves_health(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{clean_env / 'jobs.db'}"
    monkeypatch.setenv("CHOKAQ_STORAGE_URL", url)
    app = ChokaQ()
    app.storage.upgrade()
    app.close()
    module = importlib.import_module("function_app")
    handler = functions_of(module.app)["http_app_func"]
    try:
        r = asyncio.run(call(handler, get("/api/health")))
        assert r.status_code == 200 and json.loads(r.get_body()) == {"status": "ok", "db": "ok"}
    finally:
        module.app.startup_task_done = False


def test_function_timeout_app_setting_overrides_host_json(tmp_path: Path) -> None:
    host = tmp_path / "host.json"
    host.write_text(json.dumps({"version": "2.0", "functionTimeout": "00:10:00"}))
    assert function_timeout(host, environ={}) == 600
    assert function_timeout(host, environ={"AzureFunctionsJobHost__functionTimeout": "00:04:00"}) == 240
    assert function_timeout(host, environ={"AzureFunctionsJobHost__functionTimeout": "1.00:00:00"}) == 86400
    with pytest.raises(ValueError, match="AzureFunctionsJobHost__functionTimeout"):
        function_timeout(host, environ={"AzureFunctionsJobHost__functionTimeout": "ten minutes"})


def test_drain_budget_follows_the_function_timeout_app_setting(sqlite_url: str) -> None:
    app = ChokaQ(storage_url=sqlite_url)

    @app.job("x")
    def x(p: object) -> None: ...

    env = {"CHOKAQ_DRAIN_SCHEDULE": "0 */5 * * * *", "AzureFunctionsJobHost__functionTimeout": "00:04:00"}
    grace = app.settings.execution.shutdown_grace
    assert drain_budget(app, env) == (240 - grace - 30, 20)  # 240 s drain would not fit 4 minutes
    assert drain_budget(app, {**env, "AzureFunctionsJobHost__functionTimeout": "00:30:00"}) == (240, 20)
    fa = build_function_app(app, environ=env)
    assert "drain" in functions_of(fa)
    slices = slices_of(app)
    assert slices is not None and slices.seconds == 240 - grace - 30
    fa.startup_task_done = False  # type: ignore[attr-defined]
    # A timeout that is not a timespan is a refused configuration, not a silent default.
    other = ChokaQ(storage_url=sqlite_url)
    other.job("x")(lambda p: None)
    bad = build_function_app(other, environ={**env, "AzureFunctionsJobHost__functionTimeout": "soon"})
    r = asyncio.run(call(functions_of(bad)["http_app_func"], get("/api/health")))
    assert r.status_code == 503 and "functionTimeout" in json.loads(r.get_body())["error"]
    app.close()
    other.close()
