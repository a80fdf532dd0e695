"""The files `func start` and `func azure functionapp publish` read: every setting is one the
engine or Azure knows, schedules are NCRONTAB, host.json routes /api/... to the ASGI app, and
requirements.txt / .funcignore ship what function_app.py imports."""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from pathlib import Path

import pytest

from chokaq.settings import load_settings, setting_env_names
from functions import DRAIN_ENV_NAMES, build_function_app
from functions.drain import DEFAULT_DRAIN_SECONDS, MARGIN_SECONDS, function_timeout

ROOT = Path(__file__).resolve().parents[2]
# Settings the Functions host, its Python worker or Azure Monitor read themselves.
AZURE_SETTINGS = {
    "FUNCTIONS_WORKER_RUNTIME",
    "FUNCTIONS_EXTENSION_VERSION",
    "AzureWebJobsStorage",
    "AzureWebJobsFeatureFlags",
    "AzureWebJobsSecretStorageType",
    "APPLICATIONINSIGHTS_CONNECTION_STRING",
    "PYTHON_ENABLE_OPENTELEMETRY",
    "PYTHON_ENABLE_WORKER_EXTENSIONS",
    "WEBSITE_TIME_ZONE",
    "OTEL_SERVICE_NAME",
    "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY",
    "AzureFunctionsJobHost__functionTimeout",
    # The doorbell's connection (functions/doorbell.py), read by the wake trigger and the producer.
    "ChokaqDoorbell",
    "ChokaqDoorbell__queueServiceUri",
    "ChokaqDoorbell__credential",
    "ChokaqDoorbell__clientId",
}
DISABLED_FLAG = re.compile(r"^AzureWebJobs\.[A-Za-z_]\w*\.Disabled$")
NCRONTAB6 = re.compile(r"^\S+ \S+ \S+ \S+ \S+ \S+$")


def local_values() -> dict[str, str]:
    doc = json.loads((ROOT / "local.settings.example.json").read_text())
    assert doc["IsEncrypted"] is False
    values: dict[str, str] = doc["Values"]
    return values


def test_local_settings_are_known() -> None:
    known = set(setting_env_names()) | set(DRAIN_ENV_NAMES) | AZURE_SETTINGS
    unknown = [k for k in local_values() if k not in known and not DISABLED_FLAG.match(k)]
    assert not unknown, f"settings nobody reads: {unknown}"
    assert local_values()["FUNCTIONS_WORKER_RUNTIME"] == "python"


def test_local_settings_turn_the_workers_telemetry_on_only_with_a_connection_string() -> None:
    # With an empty connection string the Python worker's Azure Monitor distro fails at every start
    # (a ValueError and its traceback in the log of a fresh `func start`).
    values = local_values()
    if values.get("PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY", "").lower() == "true":
        assert values.get("APPLICATIONINSIGHTS_CONNECTION_STRING", "").strip()


def test_local_settings_pass_engine_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in setting_env_names():
        monkeypatch.delenv(name, raising=False)
    for k, v in local_values().items():
        if k.startswith("CHOKAQ_"):
            monkeypatch.setenv(k, v)
    settings = load_settings()
    assert settings.admin.tokens and all(k.startswith("sha256:") for k in settings.admin.tokens)
    assert settings.storage_url.startswith("mssql+pyodbc://")


def test_every_binding_setting_is_defined_and_schedules_are_ncrontab() -> None:
    from chokaq import ChokaQ

    values = local_values()
    app = ChokaQ(storage_url="sqlite://", functions={"doorbell_queue": values["CHOKAQ_FUNCTIONS__DOORBELL_QUEUE"]})

    @app.job("x")
    def x(p: object) -> None: ...

    fa = build_function_app(app, environ=values)
    referenced: set[str] = set()
    connections: set[str] = set()
    for f in fa.get_functions():
        referenced |= set(re.findall(r"%(\w+)%", f.get_function_json()))
        connections |= {b["connection"] for b in json.loads(f.get_function_json())["bindings"] if "connection" in b}
    assert referenced == {
        "CHOKAQ_SWEEP_SCHEDULE",
        "CHOKAQ_RETENTION_SCHEDULE",
        "CHOKAQ_DRAIN_SCHEDULE",
        "CHOKAQ_FUNCTIONS__DOORBELL_QUEUE",
    }
    for name in referenced - {"CHOKAQ_FUNCTIONS__DOORBELL_QUEUE"}:
        assert NCRONTAB6.match(values[name]), (name, values[name])
    # The wake trigger's connection is defined (Azurite locally) under the name the producer reads too.
    assert connections == {"ChokaqDoorbell"} and values["ChokaqDoorbell"] == "UseDevelopmentStorage=true"
    assert values["CHOKAQ_SWEEP_SCHEDULE"] == "*/30 * * * * *"


def test_host_json() -> None:
    host = json.loads((ROOT / "host.json").read_text())
    assert host["version"] == "2.0"
    assert host["extensions"]["http"]["routePrefix"] == ""
    assert host["extensionBundle"]["id"] == "Microsoft.Azure.Functions.ExtensionBundle"
    assert host["telemetryMode"] == "OpenTelemetry"  # the host's own records go the OTel way too
    assert host["logging"]["logLevel"]["Host.Results"] == "Information"  # request records are kept
    # The wake trigger: base64 text (what functions/doorbell.py sends), polled at least every 2 s.
    queues = host["extensions"]["queues"]
    assert queues["messageEncoding"] == "base64" and queues["maxPollingInterval"] == "00:00:02"
    assert function_timeout(ROOT / "host.json", environ={}) == 600
    assert function_timeout(ROOT / "host.json", environ={}) >= DEFAULT_DRAIN_SECONDS + 30 + MARGIN_SECONDS


def _name(req: str) -> str:
    return re.split(r"[\[<>=!~ ;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pins() -> tuple[dict[str, list[tuple[str, str]]], dict[str, list[str]], set[str]]:
    """requirements.txt as uv writes it: {name: [(version, marker)]} (one lock for every supported
    Python: a package may be pinned twice, under exclusive markers), {name: hashes}, names pulled in
    by pyproject."""
    pins: dict[str, list[tuple[str, str]]] = {}
    hashes: dict[str, list[str]] = {}
    direct: set[str] = set()
    current = ""
    via_block = False
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        stripped = line.strip()
        if not line.startswith((" ", "#")) and stripped:
            name, _, rest = stripped.partition("==")
            current = _name(name)
            version, _, marker = rest.rstrip("\\").partition(";")
            pins.setdefault(current, []).append((version.strip(), marker.strip()))
            hashes.setdefault(current, [])
            via_block = False
        elif stripped.startswith("--hash=sha256:"):
            hashes[current].append(stripped.split(":", 1)[1].rstrip("\\").strip())
        elif stripped.startswith("# via"):
            via_block = stripped == "# via"
            if "chokaq (pyproject.toml)" in stripped:
                direct.add(current)
        elif via_block and "chokaq (pyproject.toml)" in stripped:
            direct.add(current)
    return pins, hashes, direct


def test_requirements_are_the_lock_of_pyproject() -> None:
    """requirements.txt is `make requirements` output: every package pinned with hashes (the remote
    build's pip then resolves nothing), and exactly pyproject's dependencies plus the mssql, otel and
    azure extras at the top, each pin inside its pyproject range."""
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    for extra in ("mssql", "otel", "azure"):
        wanted += [Requirement(r) for r in project["optional-dependencies"][extra]]
    text = (ROOT / "requirements.txt").read_text()
    assert text.startswith("# This file was autogenerated by uv") and "#    make requirements" in text
    pins, hashes, direct = _pins()
    assert direct == {_name(r.name) for r in wanted}, "requirements.txt is stale: run make requirements"
    for req in wanted:
        for version, _ in pins[_name(req.name)]:
            assert req.specifier.contains(version, prereleases=True), (req, version)
    assert all(len(h) >= 1 and all(len(x) == 64 for x in h) for h in hashes.values()), "unhashed pins"
    assert "chokaq" not in pins  # imported from the deployed directory, not installed
    # One lock for every Python the Bicep offers (3.11 to 3.13): uv's universal resolution.
    make = (ROOT / "Makefile").read_text()
    assert "--universal --python-version 3.11" in make


@pytest.mark.parametrize("python", ["3.11.7", "3.12.1", "3.13.0"])
def test_the_lock_pins_every_package_once_for_each_supported_python(python: str) -> None:
    # What Azure runs: CPython on Linux x86_64. Under its markers each package has exactly one pin
    # (two pins, or none, for a package the lock needs would fail the remote build).
    from packaging.markers import Marker

    env = {
        "python_full_version": python,
        "python_version": python.rsplit(".", 1)[0],
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "platform_python_implementation": "CPython",
        "implementation_name": "cpython",
        "os_name": "posix",
    }
    pins, _, _ = _pins()
    chosen = {name: [v for v, m in entries if not m or Marker(m).evaluate(env)] for name, entries in pins.items()}
    assert all(len(v) <= 1 for v in chosen.values()), {n: v for n, v in chosen.items() if len(v) > 1}
    assert len(chosen["azure-functions"]) == 1 and all(len(chosen[n]) == 1 for n in ("sqlalchemy", "pyodbc"))


def _ignored(path: str, patterns: list[str]) -> bool:
    for pat in patterns:
        if pat.endswith("/"):
            if path.startswith(pat) or fnmatch.fnmatch(path.split("/")[0] + "/", pat):
                return True
        elif fnmatch.fnmatch(path, pat) or fnmatch.fnmatch(path.split("/")[-1], pat):
            return True
    return False


def test_funcignore_ships_the_package_not_the_tests() -> None:
    patterns = [
        ln.strip() for ln in (ROOT / ".funcignore").read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    for kept in (
        "chokaq/api/app.py",
        "chokaq/storage/store.py",
        "functions/drain.py",
        "function_app.py",
        "host.json",
        "requirements.txt",
    ):
        assert not _ignored(kept, patterns), kept
    for dropped in ("tests/conftest.py", ".venv/bin/python", "local.settings.json", ".git/HEAD", "chokaq.db"):
        assert _ignored(dropped, patterns), dropped


def test_local_settings_example_lists_every_setting() -> None:
    from chokaq.settings import LEGACY_ALIASES, setting_env_names

    values = json.loads((ROOT / "local.settings.example.json").read_text())["Values"]
    missing = [n for n in setting_env_names() if n not in values and n not in LEGACY_ALIASES]
    assert not missing, f"add these to local.settings.example.json: {missing}"
