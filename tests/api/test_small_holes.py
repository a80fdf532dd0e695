"""Strict request types, unknown queues, clean validation errors, token length, trust mode."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient

from chokaq import ChokaQ
from chokaq.api import create_api
from chokaq.domain.errors import ConfigurationError
from tests.api.helpers import HEADERS, enqueue, make_app, make_dead

OPS, ADMIN = HEADERS["operator"], HEADERS["admin"]


@pytest.mark.parametrize(
    ("path_kind", "body"),
    [
        ("queue", {"max_workers": "36"}),
        ("queue", {"max_workers": True}),
        ("queue", {"zombie_timeout_seconds": "120"}),
        ("queue", {"paused": "yes"}),
        ("queue", {"paused": 1}),
        ("job", {"priority": "5"}),
        ("job", {"priority": True}),
        ("job", {"force": "true", "payload": {}}),
        ("enqueue", {"type": "t", "delay_seconds": True}),
        ("enqueue", {"type": "t", "priority": 7.0}),
        ("bulk", {"ids": ["x"], "dry_run": "true"}),
        ("bulk", {"filter": {"failure_reason": True}, "dry_run": True}),
    ],
)
def test_request_types_are_strict(app: ChokaQ, client: TestClient, path_kind: str, body: dict[str, object]) -> None:
    job = enqueue(app.storage, queue="strict")
    method, path = {
        "queue": ("PATCH", "/api/queues/strict"),
        "job": ("PATCH", f"/api/jobs/{job}"),
        "enqueue": ("POST", "/api/jobs"),
        "bulk": ("POST", "/api/dlq/purge"),
    }[path_kind]
    r = client.request(method, path, headers=ADMIN, json=body)
    assert r.status_code == 422, (body, r.text)
    q = next(q for q in client.get("/api/queues", headers=ADMIN).json()["items"] if q["name"] == "strict")
    assert (q["max_workers"], q["zombie_timeout_seconds"], q["is_paused"]) == (None, None, False)


def test_validation_errors_name_fields_not_functions(app: ChokaQ, client: TestClient) -> None:
    make_dead(app.storage, 1)
    for bad in ("x\x00", ["list"], "y" * 41):
        r = client.post("/api/dlq/purge", headers=ADMIN, json={"filter": {"failure_reason": bad}, "dry_run": True})
        assert r.status_code == 422
        assert "functools" not in r.text and " at 0x" not in r.text and "function-after" not in r.text, r.text
        assert all(e["loc"][:3] == ["body", "filter", "failure_reason"] for e in r.json()["detail"])


def test_short_tokens_are_refused_at_start(sqlite_url: str) -> None:
    app = make_app(sqlite_url, admin={"tokens": {"short-token": {"name": "x", "role": "admin"}}})
    with pytest.raises(ConfigurationError, match="shorter than 16") as err:
        create_api(app)
    assert "short-token" not in str(err.value)
    # `chokaq dev` (loopback only) may use any token.
    with TestClient(create_api(app, dev_open=True)) as client:
        r = client.get("/api/meta", headers={"Authorization": "Bearer short-token"})
        assert r.json()["actor"] == "x"
    app.close()


def test_trust_mode_needs_app_service_or_a_loud_override(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("WEBSITE_AUTH_ENABLED", raising=False)
    app = make_app(sqlite_url, admin={"trust_app_service_auth": True})
    with pytest.raises(ConfigurationError, match="WEBSITE_AUTH_ENABLED"):
        create_api(app)
    monkeypatch.setenv("WEBSITE_AUTH_ENABLED", "False")
    with pytest.raises(ConfigurationError):
        create_api(app)
    monkeypatch.setenv("WEBSITE_AUTH_ENABLED", "True")
    create_api(app)
    monkeypatch.delenv("WEBSITE_AUTH_ENABLED")
    app.settings.admin.trust_app_service_auth_unverified = True
    with caplog.at_level(logging.WARNING, logger="chokaq.api.auth"):
        create_api(app)
    assert any("WITHOUT App Service" in r.message for r in caplog.records)
    app.close()
