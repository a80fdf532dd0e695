"""Cross-site requests and DNS rebinding: what a hostile page can make a browser send."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from chokaq import ChokaQ
from chokaq.api import create_api
from chokaq.cli.admin_cmds import bind_hosts
from chokaq.domain.states import Location
from tests.api.helpers import HEADERS, make_app, make_dead
from tests.api.live_server import free_port

EVIL = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}


@pytest.fixture
def open_client(app: ChokaQ) -> Iterator[TestClient]:
    """The `chokaq dev` setting: the browser itself is the credential (anyone local is admin)."""
    with TestClient(create_api(app, dev_open=True)) as c:
        yield c


def _still_dead(app: ChokaQ, job_id: str) -> bool:
    rec = app.storage.get_job(job_id)
    return rec is not None and rec.location is Location.DLQ


def test_cross_site_form_posts_are_refused(app: ChokaQ, open_client: TestClient) -> None:
    dead = make_dead(app.storage, 1)[0]
    url = f"/api/dlq/{dead}/resurrect"
    # An HTML form on another site: an empty urlencoded body, or text/plain.
    for ctype in ("application/x-www-form-urlencoded", "text/plain", "multipart/form-data; boundary=x"):
        r = open_client.post(url, headers={**EVIL, "Content-Type": ctype}, content=b"")
        assert r.status_code == 415 and r.json()["error"] == "unsupported_media_type", r.text
        r = open_client.post(url, headers={**EVIL, "Content-Type": ctype}, content=b"a=1")
        assert r.status_code == 415
    # fetch(url, {method: "POST", mode: "no-cors"}) with no body at all: no content type to judge.
    r = open_client.post(url, headers=EVIL)
    assert r.status_code == 403 and r.json()["error"] == "cross_site"
    # A JSON body from another origin needs a CORS preflight, which is never answered; without
    # the custom header the Origin alone decides.
    r = open_client.post(url, headers={**EVIL, "Content-Type": "application/json"}, json={})
    assert r.status_code == 403
    assert _still_dead(app, dead)
    for method, path in (("PATCH", f"/api/dlq/{dead}"), ("POST", "/api/dlq/purge"), ("PATCH", "/api/queues/q")):
        r = open_client.request(method, path, headers=EVIL)
        assert r.status_code == 403, (method, path, r.text)
    assert _still_dead(app, dead)


def test_same_origin_and_custom_header_pass(app: ChokaQ, open_client: TestClient) -> None:
    a, b, c = make_dead(app.storage, 3)
    r = open_client.post(f"/api/dlq/{a}/resurrect", headers={"Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 200, r.text
    r = open_client.post(f"/api/dlq/{b}/resurrect", headers={"Origin": "http://testserver"})
    assert r.status_code == 200, r.text
    r = open_client.post(f"/api/dlq/{c}/resurrect", headers={"X-ChokaQ-Request": "1"}, json={})
    assert r.status_code == 200, r.text
    # Reads are not affected.
    assert open_client.get("/api/stats", headers=EVIL).status_code == 200


def test_app_service_cookie_sign_in_is_no_cross_site_credential(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEBSITE_AUTH_ENABLED", "True")
    app = make_app(sqlite_url, admin={"trust_app_service_auth": True})
    dead = make_dead(app.storage, 1)[0]
    doc = {
        "name_typ": "name",
        "role_typ": "roles",
        "claims": [{"typ": "name", "val": "ana"}, {"typ": "roles", "val": "chokaq.admin"}],
    }
    # What App Service injects for a browser whose sign-in cookie rides along on any request.
    principal = {"X-MS-CLIENT-PRINCIPAL": base64.b64encode(json.dumps(doc).encode()).decode()}
    with TestClient(create_api(app)) as client:
        r = client.post(f"/api/dlq/{dead}/resurrect", headers={**principal, **EVIL})
        assert r.status_code == 403 and r.json()["error"] == "cross_site"
        assert _still_dead(app, dead)
        r = client.post(f"/api/dlq/{dead}/resurrect", headers={**principal, "Sec-Fetch-Site": "same-origin"})
        assert r.status_code == 200
    app.close()


def test_host_header_checked_against_the_bind_address(app: ChokaQ) -> None:
    assert bind_hosts("0.0.0.0") is None and bind_hosts("10.1.2.3") == ["10.1.2.3"]
    with TestClient(
        create_api(app, dev_open=True, allowed_hosts=bind_hosts("127.0.0.1")), base_url="http://127.0.0.1:7071"
    ) as client:
        assert client.get("/api/meta").status_code == 200
        assert client.get("/api/meta", headers={"Host": "localhost:7071"}).status_code == 200
        r = client.get("/api/meta", headers={"Host": "rebound.evil.example:7071"})
        assert r.status_code == 400 and r.json()["error"] == "bad_host"
        assert client.get("/deck/", headers={"Host": "rebound.evil.example"}).status_code == 400


def test_configured_hosts_apply_to_every_server(sqlite_url: str) -> None:
    app = make_app(sqlite_url, admin={"allowed_hosts": ["chokaq.example.com"]})
    with TestClient(create_api(app), base_url="https://chokaq.example.com") as client:
        assert client.get("/api/meta", headers=HEADERS["viewer"]).status_code == 200
        r = client.get("/api/meta", headers={**HEADERS["viewer"], "Host": "other.example"})
        assert r.status_code == 400
    app.close()


def test_chokaq_dev_refuses_a_rebound_host(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from chokaq.cli.main import main; main()",
            "--db",
            f"sqlite:///{tmp_path}/dev.db",
            "dev",
            "--no-seed",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/meta", timeout=2) as r:
                    assert r.status == 200
                    break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None and time.monotonic() < deadline, "chokaq dev did not start"
                time.sleep(0.1)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/api/meta", headers={"Host": "attacker.example"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=5)
        assert err.value.code == 400
    finally:
        proc.terminate()
        proc.wait(30)
