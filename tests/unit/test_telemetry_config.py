"""Which exporter chokaq wires up. The Azure Monitor distro cannot reach Azure from here, so its
entry point is replaced by a recorder; the OTLP path is exercised for real in
tests/acceptance/test_otlp.py."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from chokaq import telemetry


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry, "_configured", False)
    for name in (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "APPLICATIONINSIGHTS_CONNECTION_STRING",
        "PYTHON_ENABLE_OPENTELEMETRY",
        "FUNCTIONS_WORKER_RUNTIME",
        "OTEL_SDK_DISABLED",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ):
        monkeypatch.delenv(name, raising=False)


def fake_distro(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    module = types.ModuleType("azure.monitor.opentelemetry")
    module.configure_azure_monitor = lambda **kw: calls.append(kw)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "azure.monitor.opentelemetry", module)
    return calls


def test_nothing_is_exported_without_settings() -> None:
    assert telemetry.configure() is False


def test_application_insights_uses_the_azure_monitor_distro(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_distro(monkeypatch)
    monkeypatch.setenv("APPLICATIONINSIGHTS_CONNECTION_STRING", "InstrumentationKey=00000000-0000-0000-0000-0")
    assert telemetry.configure("chokaq-worker") is True
    assert calls == [{"connection_string": "InstrumentationKey=00000000-0000-0000-0000-0"}]


def test_no_double_export_inside_the_functions_host(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_distro(monkeypatch)
    monkeypatch.setenv("APPLICATIONINSIGHTS_CONNECTION_STRING", "InstrumentationKey=x")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("PYTHON_ENABLE_OPENTELEMETRY", "true")
    monkeypatch.setenv("FUNCTIONS_WORKER_RUNTIME", "python")
    assert telemetry.configure() is False
    assert calls == []
