"""Which exporter chokaq wires up. The Azure Monitor distro cannot reach Azure from here, so its
entry point is replaced by a recorder; the OTLP path is exercised for real in
tests/acceptance/test_otlp.py, and the decision from the real installed providers (Functions
worker or not) in tests/functions/test_telemetry.py, in fresh processes. Here the test process's
own providers (tests/conftest.py installs in-memory ones) are hidden: nothing is installed."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from chokaq import telemetry


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry, "_configured", False)
    monkeypatch.setattr(telemetry, "tracing_active", lambda: False)
    monkeypatch.setattr(telemetry, "metrics_active", lambda: False)
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
    assert calls == [
        {
            "connection_string": "InstrumentationKey=00000000-0000-0000-0000-0",
            "disable_tracing": False,
            "disable_metrics": False,
            "disable_logging": False,
        }
    ]


def test_functions_env_vars_alone_do_not_stop_the_export(monkeypatch: pytest.MonkeyPatch) -> None:
    """PYTHON_ENABLE_OPENTELEMETRY=true used to make chokaq add nothing, and with a worker that had
    installed no provider every span and metric was dropped. Only installed providers count now."""
    calls = fake_distro(monkeypatch)
    monkeypatch.setenv("APPLICATIONINSIGHTS_CONNECTION_STRING", "InstrumentationKey=x")
    monkeypatch.setenv("PYTHON_ENABLE_OPENTELEMETRY", "true")
    monkeypatch.setenv("FUNCTIONS_WORKER_RUNTIME", "python")
    assert telemetry.configure() is True
    # The host ships the worker's logs itself: only traces and metrics from the distro.
    assert calls == [
        {
            "connection_string": "InstrumentationKey=x",
            "disable_tracing": False,
            "disable_metrics": False,
            "disable_logging": True,
        }
    ]


def test_only_the_signal_without_a_provider_gets_an_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_distro(monkeypatch)
    monkeypatch.setenv("APPLICATIONINSIGHTS_CONNECTION_STRING", "InstrumentationKey=x")
    monkeypatch.setattr(telemetry, "tracing_active", lambda: True)
    assert telemetry.configure() is True
    assert calls[0]["disable_tracing"] is True and calls[0]["disable_metrics"] is False


def test_no_exporter_when_both_providers_are_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_distro(monkeypatch)
    monkeypatch.setenv("APPLICATIONINSIGHTS_CONNECTION_STRING", "InstrumentationKey=x")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setattr(telemetry, "tracing_active", lambda: True)
    monkeypatch.setattr(telemetry, "metrics_active", lambda: True)
    assert telemetry.configure() is False
    assert calls == []
