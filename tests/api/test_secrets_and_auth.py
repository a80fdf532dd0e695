"""Errors never carry secrets; malformed identity headers and odd paths are 4xx with a reason."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from chokaq.api import create_api
from chokaq.redact import redact
from tests.api.helpers import make_app

SECRET = "supersecret-token-4242"
PASSWORD = "hunter2-Pa55"
CLI = [sys.executable, "-c", "from chokaq.cli.main import main; main()"]


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in __import__("os").environ.items() if not k.startswith("CHOKAQ_")}
    return subprocess.run([*CLI, *args], env={**full, **env}, cwd=cwd, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    "tokens",
    [
        f'{{"{SECRET}": "not an object"}}',
        f'{{"{SECRET}": {{"name": "a", "role": "boss"}}',  # not JSON at all
        f'{{"{SECRET}": {{"name": 5, "role": "admin"}}}}',
        f'{{"{SECRET}": {{"role": "admin"}}}}',
    ],
)
def test_a_malformed_token_setting_never_prints_the_token(tmp_path: Path, tokens: str) -> None:
    for args in (["serve", "--port", "7999"], ["health"]):
        r = _run(args, {"CHOKAQ_ADMIN__TOKENS": tokens, "CHOKAQ_STORAGE_URL": f"sqlite:///{tmp_path}/x.db"}, tmp_path)
        if args[0] == "health" and r.returncode == 0:
            continue  # health does not read the tokens when they are well-formed JSON
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert SECRET not in r.stdout + r.stderr
        assert r.stderr.strip().splitlines()[-1].startswith("error: ") and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("url", "commands"),
    [
        (f"postgresql://ops:{PASSWORD}@127.0.0.1:notaport/chokaq", ("health", "db")),
        (f"postgres ql://ops:{PASSWORD}@db.example/chokaq", ("health", "serve")),  # refused when the app is built
        (f"mssql+pyodbc://ops:{PASSWORD}@srv/db?driver=Nope&odbc_connect=PWD%3D{PASSWORD}", ("health",)),
        # Not a URL at all (no "://"): SQLAlchemy's own message repeats it whole.
        (f"postgresql+psycopg//app:{PASSWORD}@db.example/app", ("stats", "health", "db")),
        (f"mssql+pyodbc:app:{PASSWORD}@srv/db", ("stats",)),
    ],
)
def test_a_malformed_storage_url_never_prints_its_password(tmp_path: Path, url: str, commands: tuple[str]) -> None:
    argv = {"health": ["health"], "db": ["db", "upgrade"], "serve": ["serve", "--port", "7999"], "stats": ["stats"]}
    for args in (argv[c] for c in commands):
        r = _run(args, {"CHOKAQ_STORAGE_URL": url}, tmp_path)
        assert r.returncode != 0
        assert PASSWORD not in r.stdout + r.stderr, r.stderr
        assert "Traceback" not in r.stderr, r.stderr[-500:]
        if args == ["stats"]:  # the one-line error still says which URL, without the secret
            assert r.stderr.startswith("error: ") and ":***@" in r.stderr, r.stderr


def test_the_api_factory_refuses_a_malformed_url_without_its_password(caplog: pytest.LogCaptureFixture) -> None:
    from chokaq import ChokaQ
    from chokaq.domain.errors import ConfigurationError

    app = ChokaQ(storage_url=f"postgresql+psycopg//app:{PASSWORD}@db.example/app")
    with pytest.raises(ConfigurationError) as err:
        create_api(app)
    assert PASSWORD not in str(err.value) and "app:***@db.example" in str(err.value)
    assert PASSWORD not in caplog.text


def test_redact() -> None:
    assert redact("postgresql+psycopg://u:p%40ss@h:5432/db") == "postgresql+psycopg://u:***@h:5432/db"
    assert redact("Driver=x;Server=s;UID=u;PWD={a;b};Encrypt=yes") == "Driver=x;Server=s;UID=u;PWD=***;Encrypt=yes"
    assert redact("https://acct.blob/x?sig=abc&se=1") == "https://acct.blob/x?sig=***&se=1"
    assert redact("postgresql://u@h/db") == "postgresql://u@h/db"
    # What does not parse as a URL still hides its userinfo's password.
    assert redact("'postgresql+psycopg//app:S3cretPW@db.example/app'") == "'postgresql+psycopg//app:***@db.example/app'"
    assert redact("db app:pa:ss@w0rd@h/x") == "db app:***@h/x"
    assert redact("odbc_connect=Driver%3Dx%3BPWD%3Ds3cret%3BUID%3Du") == "odbc_connect=Driver%3Dx%3BPWD%3D***%3BUID%3Du"
    # Text that only looks a little like it is left alone.
    assert redact("at 12:30 mail ops@example.com") == "at 12:30 mail ops@example.com"


def _b64(doc: object) -> str:
    return base64.b64encode(json.dumps(doc).encode()).decode()


MALFORMED_PRINCIPALS = {
    "nested 5000": base64.b64encode(("[" * 5000 + "]" * 5000).encode()).decode(),
    "claims 5": _b64({"claims": 5}),
    "true": _b64(True),
    "list role_typ": _b64(
        {
            "role_typ": ["roles"],
            "name_typ": "n",
            "claims": [{"typ": "n", "val": "x"}, {"typ": "roles", "val": "chokaq.admin"}],
        }
    ),
    "list typ": _b64({"name_typ": "n", "claims": [{"typ": ["n"], "val": "x"}, {"typ": {"a": 1}, "val": "y"}]}),
    "dict val": _b64({"name_typ": "n", "claims": [{"typ": "n", "val": {"x": 1}}]}),
    "not base64": "%%%",
    "huge": "A" * 100_000,
}


@pytest.mark.parametrize("header", MALFORMED_PRINCIPALS.values(), ids=MALFORMED_PRINCIPALS.keys())
def test_a_malformed_app_service_principal_is_401(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, header: str
) -> None:
    monkeypatch.setenv("WEBSITE_AUTH_ENABLED", "True")
    app = make_app(sqlite_url, admin={"trust_app_service_auth": True})
    with TestClient(create_api(app), raise_server_exceptions=False) as client:
        for method, path in (("GET", "/api/meta"), ("POST", "/api/dlq/purge")):
            r = client.request(method, path, headers={"X-MS-CLIENT-PRINCIPAL": header})
            assert r.status_code == 401, (method, r.text)
            assert r.json()["error"] == "unauthenticated" and r.json()["detail"]
    app.close()


def test_odd_deck_paths_are_not_500s_and_redirects_do_not_echo_host(client: TestClient) -> None:
    for path in ("/deck/%00", "/deck/a%00b.js", "/deck/%2e%2e/%2e%2e/etc/passwd", "/deck/" + "a" * 5000):
        r = client.get(path)
        assert r.status_code == 404, (path, r.status_code)
    for path in ("/deck", "/"):
        r = client.get(path, headers={"Host": "evil.example"}, follow_redirects=False)
        assert r.status_code in (301, 302, 307, 308)
        assert r.headers["location"] == "/deck/"
