"""Checks of docker-compose.yml, Dockerfile and .dockerignore (parsed only: no Docker engine here)."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import pytest
import yaml
from sqlalchemy.dialects.mssql.pyodbc import MSDialect_pyodbc
from sqlalchemy.engine import make_url

from .conftest import COMPOSE_FILE, DOCKERFILE, DOCKERIGNORE, app_option_value, parse_with_real_cli

_COMPOSE_VAR = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def _interpolate(value: str) -> str:
    """Compose-style ${VAR:-default} with an empty environment."""
    return _COMPOSE_VAR.sub(lambda m: m.group(2) or "", value)


def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def _image_entrypoint() -> list[str]:
    (entry,) = [rest for kw, rest in _dockerfile_instructions() if kw == "ENTRYPOINT"]
    return json.loads(entry)


def _effective_argv(service: dict[str, Any]) -> list[str]:
    entrypoint = service.get("entrypoint", _image_entrypoint() if "build" in service else [])
    if isinstance(entrypoint, str):
        entrypoint = shlex.split(entrypoint)
    command = service.get("command", [])
    if isinstance(command, str):
        command = shlex.split(command)
    return [*entrypoint, *command]


def test_compose_services() -> None:
    services = _compose()["services"]
    assert {"sqlserver", "sqlserver-init", "migrate"} <= set(services)


def test_sqlserver_init_creates_the_chokaq_database_with_rcsi() -> None:
    services = _compose()["services"]
    init = services["sqlserver-init"]
    assert init["image"] == services["sqlserver"]["image"]  # its sqlcmd, no other image to pull
    argv = _effective_argv(init)
    assert argv[0].endswith("/sqlcmd") and "-b" in argv, argv  # -b: a failed batch fails the service
    script_in_container = argv[argv.index("-i") + 1]
    (mount,) = [v for v in init["volumes"] if v.split(":")[1] == script_in_container]
    script = (COMPOSE_FILE.parent / mount.split(":")[0]).read_text()
    assert "CREATE DATABASE [chokaq]" in script
    assert "ALTER DATABASE [chokaq] SET READ_COMMITTED_SNAPSHOT ON" in script
    assert re.search(r"^GO$", script, re.M)
    # The SA password reaches sqlcmd through the environment, not the command line.
    assert "MSSQL_SA_PASSWORD" in init["environment"]["SQLCMDPASSWORD"]
    assert not any("MSSQL_SA_PASSWORD" in a for a in argv)
    assert init["depends_on"]["sqlserver"]["condition"] == "service_healthy"
    assert services["migrate"]["depends_on"]["sqlserver-init"]["condition"] == "service_completed_successfully"


def test_local_settings_use_the_chokaq_database() -> None:
    values = json.loads((COMPOSE_FILE.parent / "local.settings.example.json").read_text())["Values"]
    parsed = make_url(values["CHOKAQ_STORAGE_URL"])
    assert (parsed.drivername, parsed.database, parsed.port) == ("mssql+pyodbc", "chokaq", 1433)
    services = _compose()["services"]
    assert parsed.password == _interpolate(services["sqlserver"]["environment"]["MSSQL_SA_PASSWORD"])


def test_sqlserver_service() -> None:
    sqlserver = _compose()["services"]["sqlserver"]
    assert sqlserver["image"].startswith("mcr.microsoft.com/mssql/server:2022")
    env = sqlserver["environment"]
    assert env["ACCEPT_EULA"] == "Y"
    password = _interpolate(env["MSSQL_SA_PASSWORD"])
    assert "MSSQL_SA_PASSWORD" in env["MSSQL_SA_PASSWORD"], "the SA password must come from the environment"
    # SQL Server policy: at least 8 characters from at least 3 of 4 classes.
    classes = sum(bool(re.search(p, password)) for p in (r"[a-z]", r"[A-Z]", r"\d", r"[^\w]|_"))
    assert len(password) >= 8 and classes >= 3, password
    test = sqlserver["healthcheck"]["test"]
    joined = " ".join(test) if isinstance(test, list) else test
    assert "sqlcmd" in joined and "SELECT 1" in joined


def test_migrate_runs_db_upgrade_after_the_database_is_created() -> None:
    migrate = _compose()["services"]["migrate"]
    assert migrate["build"]["context"] == "."
    assert migrate["build"].get("dockerfile", "Dockerfile") == "Dockerfile"
    assert _effective_argv(migrate) == ["chokaq", "db", "upgrade"]
    # sqlserver-init itself waits for a healthy sqlserver.
    assert migrate["depends_on"]["sqlserver-init"]["condition"] == "service_completed_successfully"


def test_migrate_command_parses_with_real_cli() -> None:
    commands, _ = parse_with_real_cli(_effective_argv(_compose()["services"]["migrate"]))
    assert commands == ["db", "upgrade"]


def test_image_healthcheck_and_default_command_parse_with_real_cli() -> None:
    assert parse_with_real_cli(["chokaq", "health"])[0] == ["health"]
    (cmd,) = [rest for kw, rest in _dockerfile_instructions() if kw == "CMD"]
    assert parse_with_real_cli([*_image_entrypoint(), *json.loads(cmd)])[0] == ["worker"]


@pytest.mark.parametrize("service_name", ["migrate", "worker"])
def test_storage_url_reaches_compose_sqlserver(service_name: str) -> None:
    services = _compose()["services"]
    url = _interpolate(services[service_name]["environment"]["CHOKAQ_STORAGE_URL"])
    parsed = make_url(url)
    assert parsed.drivername == "mssql+pyodbc"
    assert (parsed.host, parsed.port, parsed.username) == ("sqlserver", 1433, "sa")
    assert parsed.password == _interpolate(services["sqlserver"]["environment"]["MSSQL_SA_PASSWORD"])
    assert parsed.database == "chokaq"
    assert parsed.query["driver"] == "ODBC Driver 18 for SQL Server"
    assert parsed.query["TrustServerCertificate"] == "yes"
    args, _ = MSDialect_pyodbc().create_connect_args(parsed)
    assert "Server=sqlserver,1433" in args[0]


def test_worker_service() -> None:
    services = _compose()["services"]
    worker = services["worker"]
    argv = [_interpolate(a) for a in _effective_argv(worker)]
    assert argv[0] == "chokaq" and "worker" in argv, argv
    assert re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", app_option_value(argv)), argv
    commands, values = parse_with_real_cli(argv)
    assert commands == ["worker"] and values["app_spec"] == app_option_value(argv)
    assert worker["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_dockerfile() -> None:
    instructions = _dockerfile_instructions()
    froms = [rest for kw, rest in instructions if kw == "FROM"]
    assert froms[-1].split()[0] == "python:3.11-slim-bookworm"
    runs = " ".join(rest for kw, rest in instructions if kw == "RUN")
    assert "packages.microsoft.com" in runs
    assert "ACCEPT_EULA=Y apt-get install" in runs and "msodbcsql18" in runs
    assert re.search(r"pip install \"?\.\[\$\{CHOKAQ_EXTRAS\}\]\"?", runs)
    (extras,) = [rest for kw, rest in instructions if kw == "ARG" and rest.startswith("CHOKAQ_EXTRAS=")]
    assert set(extras.split("=", 1)[1].split(",")) >= {"mssql", "otel"}
    users = [rest for kw, rest in instructions if kw == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    (health,) = [rest for kw, rest in instructions if kw == "HEALTHCHECK"]
    assert re.search(r"CMD \[\"chokaq\", \"health\"\]", health), health
    assert _image_entrypoint() == ["chokaq"]
    (cmd,) = [rest for kw, rest in instructions if kw == "CMD"]
    assert json.loads(cmd)[0] == "worker"


def test_dockerignore_keeps_secrets_and_venvs_out() -> None:
    patterns = {line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip()}
    for required in (".git", ".venv", ".env", "local.settings.json"):
        assert required in patterns, required
    for needed in ("chokaq", "pyproject.toml", "README.md"):
        assert needed not in patterns, f"{needed} is needed in the image"
