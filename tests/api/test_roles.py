"""Every route against every role: anonymous 401, too-low role 403, enough role succeeds. A refused
call changes nothing and writes no audit row."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from chokaq import ChokaQ
from chokaq.api import create_api
from chokaq.domain.breakers import BreakerPolicy
from chokaq.domain.schedules import ScheduleSpec
from chokaq.domain.workers import WorkerIdentity
from chokaq.operations.job_out import JobOut
from chokaq.storage import BreakerStore, ScheduleStore, WorkerPresence
from tests.api.helpers import HEADERS, enqueue, make_app, make_dead

ROLES = ["anonymous", "viewer", "operator", "admin"]
RANK = {"anonymous": 0, "viewer": 1, "operator": 2, "admin": 3}

# (name, method, path, json body, least role, status when allowed)
ROUTES: list[tuple[str, str, str, Any, str, int]] = [
    ("health", "GET", "/api/health", None, "anonymous", 200),
    ("stats", "GET", "/api/stats", None, "viewer", 200),
    ("stats history", "GET", "/api/stats/history?window=6h", None, "viewer", 200),
    ("meta", "GET", "/api/meta", None, "viewer", 200),
    ("queues", "GET", "/api/queues", None, "viewer", 200),
    ("queue_patch", "PATCH", "/api/queues/default", {"paused": True}, "operator", 200),
    ("enqueue", "POST", "/api/jobs", {"type": "t", "payload": {"a": 1}}, "operator", 201),
    ("jobs_hot", "GET", "/api/jobs", None, "viewer", 200),
    ("jobs_archive", "GET", "/api/jobs?location=archive", None, "viewer", 200),
    ("job_show", "GET", "/api/jobs/{P}", None, "viewer", 200),
    ("job_edit", "PATCH", "/api/jobs/{P}", {"priority": 5}, "operator", 200),
    ("job_edit_force", "PATCH", "/api/jobs/{P}", {"payload": {"x": 1}, "force": True}, "admin", 200),
    ("cancel", "POST", "/api/jobs/cancel", {"ids": ["{P}"]}, "operator", 200),
    ("reschedule", "POST", "/api/jobs/{P}/reschedule", {"now": True}, "operator", 200),
    ("dlq_list", "GET", "/api/dlq", None, "viewer", 200),
    ("dlq_incidents", "GET", "/api/dlq/incidents", None, "viewer", 200),
    ("dlq_show", "GET", "/api/dlq/{D}", None, "viewer", 200),
    ("dlq_edit", "PATCH", "/api/dlq/{D}", {"tags": "x"}, "operator", 200),
    ("dlq_edit_force", "PATCH", "/api/dlq/{D}", {"payload": [], "force": True}, "admin", 200),
    ("resurrect", "POST", "/api/dlq/{D}/resurrect", None, "operator", 200),
    ("resurrect_edit", "POST", "/api/dlq/{D}/resurrect", {"priority": 1}, "operator", 200),
    ("resurrect_force", "POST", "/api/dlq/{D}/resurrect", {"payload": {}, "force": True}, "admin", 200),
    ("resurrect_bulk", "POST", "/api/dlq/resurrect", {"ids": ["{D}"]}, "operator", 200),
    ("resurrect_bulk_dry", "POST", "/api/dlq/resurrect", {"filter": {}, "all": True, "dry_run": True}, "operator", 200),
    ("purge", "POST", "/api/dlq/purge", {"ids": ["{D}"]}, "admin", 200),
    ("purge_dry", "POST", "/api/dlq/purge", {"filter": {"queue": "default"}, "dry_run": True}, "admin", 200),
    ("archive_purge", "POST", "/api/archive/purge", {"older_than": "2000-01-01T00:00:00Z"}, "admin", 200),
    ("audit", "GET", "/api/audit", None, "viewer", 200),
    ("workers", "GET", "/api/workers", None, "viewer", 200),
    ("worker_show", "GET", "/api/workers/w-1", None, "viewer", 200),
    ("schedules", "GET", "/api/schedules", None, "viewer", 200),
    ("schedule_pause", "POST", "/api/schedules/default/pause", None, "operator", 200),
    ("schedule_resume", "POST", "/api/schedules/default/resume", None, "operator", 200),
    ("schedule_run", "POST", "/api/schedules/default/run", None, "operator", 200),
    ("schedule_edit", "PATCH", "/api/schedules/default", {"cron": "0 4 * * *"}, "admin", 200),
    ("breakers", "GET", "/api/breakers", None, "viewer", 200),
    ("breaker_close", "POST", "/api/breakers/t/close", None, "operator", 200),
    ("events_recent", "GET", "/api/events/recent", None, "viewer", 200),
    ("events_stream", "GET", "/api/events?max_events=1", None, "viewer", 200),
]
MUTATING = {
    "queue_patch",
    "enqueue",
    "job_edit",
    "job_edit_force",
    "cancel",
    "reschedule",
    "dlq_edit",
    "dlq_edit_force",
    "resurrect",
    "resurrect_edit",
    "resurrect_force",
    "resurrect_bulk",
    "purge",
    "archive_purge",
    "schedule_pause",
    "schedule_resume",
    "schedule_run",
    "schedule_edit",
    "breaker_close",
}


@pytest.fixture
def env(sqlite_url: str) -> Iterator[tuple[ChokaQ, TestClient, dict[str, str]]]:
    app = make_app(sqlite_url)
    ids = {"P": enqueue(app.storage), "D": make_dead(app.storage, 1)[0]}
    ScheduleStore(app.storage).sync([ScheduleSpec("default", "0 3 * * *", "t", queue="default")])
    BreakerStore(app.storage).record_failure("t", BreakerPolicy(failure_threshold=1), "w")  # open
    WorkerPresence(app.storage, WorkerIdentity("w-1", "h", 1, "0.1.0", None, 1)).record(0, starting=True)
    with TestClient(create_api(app)) as client:
        yield app, client, ids
    app.close()


def _fill(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**ids)
    if isinstance(value, list):
        return [_fill(v, ids) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, ids) for k, v in value.items()}
    return value


def _snapshot(app: ChokaQ, ids: dict[str, str]) -> Any:
    s = app.storage
    return (
        [JobOut.from_record(s.get_job(i)).model_dump() for i in ids.values()],  # type: ignore[arg-type]
        [(q.name, q.is_paused) for q in s.list_queues()],
        [(x.queue, x.pending, x.dlq_size) for x in s.queue_stats()],
        ScheduleStore(s).list(),
        BreakerStore(s).every(),
    )


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("name", "method", "path", "body", "least", "ok"), ROUTES, ids=[r[0] for r in ROUTES])
def test_role_matrix(
    env: tuple[ChokaQ, TestClient, dict[str, str]],
    role: str,
    name: str,
    method: str,
    path: str,
    body: Any,
    least: str,
    ok: int,
) -> None:
    app, client, ids = env
    before = _snapshot(app, ids)
    r = client.request(method, _fill(path, ids), headers=HEADERS[role], json=_fill(body, ids))
    if RANK[role] >= RANK[least]:
        assert r.status_code == ok, r.text
        return
    expected = 401 if role == "anonymous" else 403
    assert r.status_code == expected, r.text
    err = r.json()
    assert err["error"] == ("unauthenticated" if expected == 401 else "forbidden") and err["detail"]
    if expected == 401:
        assert r.headers["www-authenticate"] == "Bearer"
    assert _snapshot(app, ids) == before
    audit = client.get("/api/audit", headers=HEADERS["admin"]).json()
    assert audit["total"] == 0


def test_every_mutating_route_is_in_the_matrix() -> None:
    """Guard: a new POST/PATCH/DELETE route must be added to ROUTES."""
    from chokaq.api import create_api as build

    app = make_app("sqlite://")
    api = build(app)
    declared = {(m, p.split("?")[0]) for _, m, p, *_ in ROUTES}
    paths = api.openapi()["paths"]
    assert len(paths) >= 17
    for path, ops in paths.items():
        for method in ops:
            m = method.upper()
            pattern = path.replace("{name}", "default").replace("{job_type}", "t").replace("{worker_id}", "w-1")
            candidates = {(m, pattern.replace("{job_id}", x)) for x in ("{P}", "{D}")}
            assert candidates & declared, (m, path)
    assert {r[0] for r in ROUTES} >= MUTATING


# ---------------------------------------------------------------- identity sources
def _principal(claims: list[dict[str, str]], **extra: Any) -> str:
    doc = {"auth_typ": "aad", "name_typ": "preferred_username", "role_typ": "roles", "claims": claims, **extra}
    return base64.b64encode(json.dumps(doc).encode()).decode()


def test_app_service_principal_roles(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBSITE_AUTH_ENABLED", "True")  # what App Service sets with Authentication on
    app = make_app(sqlite_url, admin={"trust_app_service_auth": True})
    with TestClient(create_api(app)) as client:

        def meta(header: str, **h: str) -> Any:
            return client.get("/api/meta", headers={"X-MS-CLIENT-PRINCIPAL": header, **h})

        claims = [
            {"typ": "preferred_username", "val": "ana@contoso.com"},
            {"typ": "roles", "val": "chokaq.viewer"},
            {"typ": "roles", "val": "Chokaq.Operator"},
        ]
        r = meta(_principal(claims))
        assert r.status_code == 200 and (r.json()["actor"], r.json()["role"]) == ("ana@contoso.com", "operator")
        # Highest role wins; the configured role claim type counts too.
        r = meta(_principal([*claims, {"typ": "roles", "val": "admin"}]))
        assert r.json()["role"] == "admin"
        # Name from X-MS-CLIENT-PRINCIPAL-NAME when the claims lack it.
        r = meta(_principal([{"typ": "roles", "val": "chokaq.viewer"}]), **{"X-MS-CLIENT-PRINCIPAL-NAME": "bob"})
        assert (r.json()["actor"], r.json()["role"]) == ("bob", "viewer")
        # Signed in without a chokaq role: 403; garbage header: 401.
        r = meta(_principal([{"typ": "preferred_username", "val": "eve"}, {"typ": "roles", "val": "other"}]))
        assert r.status_code == 403 and "no chokaq role" in r.json()["detail"]
        assert meta("not base64!").status_code == 401
        # Viewer through App Service cannot mutate.
        r = client.patch(
            "/api/queues/q", json={"paused": True}, headers={"X-MS-CLIENT-PRINCIPAL": _principal(claims[:2])}
        )
        assert r.status_code == 403
        # The audit records the App Service name.
        # (A browser's own request: the sign-in is a cookie, so the same-origin check applies.)
        r = client.patch(
            "/api/queues/q",
            json={"paused": True, "create": True},
            headers={"X-MS-CLIENT-PRINCIPAL": _principal(claims), "Sec-Fetch-Site": "same-origin"},
        )
        assert r.status_code == 200, r.text
        assert client.get("/api/audit", headers=HEADERS["admin"]).json()["items"][0]["actor"] == "ana@contoso.com"
    app.close()


def test_app_service_header_ignored_unless_trusted(sqlite_url: str) -> None:
    app = make_app(sqlite_url)
    with TestClient(create_api(app)) as client:
        forged = _principal([{"typ": "preferred_username", "val": "x"}, {"typ": "roles", "val": "chokaq.admin"}])
        assert client.get("/api/meta", headers={"X-MS-CLIENT-PRINCIPAL": forged}).status_code == 401
        r = client.get("/api/meta", headers={"X-MS-CLIENT-PRINCIPAL": forged, **HEADERS["viewer"]})
        assert r.json()["role"] == "viewer"
    app.close()


def test_tokens_plain_and_hashed_and_bad(sqlite_url: str) -> None:
    app = make_app(sqlite_url)
    with TestClient(create_api(app)) as client:
        r = client.get("/api/meta", headers=HEADERS["operator"])  # stored as sha256:<hex>
        assert (r.json()["actor"], r.json()["role"], r.json()["dev_open"]) == ("ops@example.com", "operator", False)
        assert client.get("/api/meta", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/api/meta", headers={"Authorization": "Basic abc"}).status_code == 401
        # The hash itself is not a token.
        digest = next(k for k in app.settings.admin.tokens if k.startswith("sha256:"))
        assert client.get("/api/meta", headers={"Authorization": f"Bearer {digest}"}).status_code == 401
        assert client.get("/api/meta", headers={"Authorization": f"Bearer {digest[7:]}"}).status_code == 401
    app.close()


def test_bad_token_settings_refuse_to_start(sqlite_url: str) -> None:
    from chokaq.domain.errors import ConfigurationError

    app = make_app(sqlite_url, admin={"tokens": {"some-long-token-value": {"name": "x", "role": "root"}}})
    with pytest.raises(ConfigurationError, match="role"):
        create_api(app)
    app.close()


def test_dev_open_is_admin_and_logged(sqlite_url: str, caplog: pytest.LogCaptureFixture) -> None:
    app = make_app(sqlite_url)
    with caplog.at_level("WARNING", logger="chokaq.api"):
        api = create_api(app, dev_open=True)
    assert any("OPEN" in rec.message for rec in caplog.records)
    with TestClient(api) as client:
        meta = client.get("/api/meta").json()
        assert (meta["actor"], meta["role"], meta["dev_open"]) == ("dev (open)", "admin", True)
        # A token still identifies its holder in dev mode.
        assert client.get("/api/meta", headers=HEADERS["viewer"]).json()["role"] == "viewer"
    app.close()
