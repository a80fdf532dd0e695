"""Telemetry that arrives, through the path the Functions worker takes: index function_app.py with
the Azure settings the Bicep deploys, invoke the sweep timer, and see its span and metric reach a
real Application Insights ingestion endpoint (a loopback HTTP receiver, the Azure Monitor exporter
posting to it over a socket). Once, never twice, whether the worker installed providers or not.

Each case runs in its own process: OpenTelemetry's global providers can be set only once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("azure.monitor.opentelemetry")

ROOT = Path(__file__).resolve().parents[2]
IKEY = "00000000-0000-0000-0000-000000000000"


class Ingestion:
    """Collects the envelopes an Application Insights exporter posts to /v2.1/track."""

    def __init__(self) -> None:
        self.envelopes: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def spans(self, name: str) -> list[dict[str, Any]]:
        with self.lock:
            return [
                e
                for e in self.envelopes
                if e["name"].endswith(("RemoteDependency", "Request")) and e["data"]["baseData"].get("name") == name
            ]

    def metric_points(self, name: str) -> list[dict[str, Any]]:
        with self.lock:
            return [
                m
                for e in self.envelopes
                if e["name"].endswith(".Metric")
                for m in e["data"]["baseData"].get("metrics", [])
                if m["name"] == name
            ]


@pytest.fixture
def ingestion() -> Iterator[tuple[Ingestion, str]]:
    got = Ingestion()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            items = json.loads(body) if self.path.endswith("/v2.1/track") else []
            with got.lock:
                got.envelopes.extend(items)
            reply = json.dumps({"itemsReceived": len(items), "itemsAccepted": len(items), "errors": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield got, f"InstrumentationKey={IKEY};IngestionEndpoint=http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def azure_settings(connection_string: str, db: Path) -> dict[str, str]:
    """The Function App's settings as infra/bicep/modules/functionapp.bicep sets them."""
    ours = ("CHOKAQ_", "OTEL_", "APPLICATIONINSIGHTS_", "PYTHON_ENABLE", "PYTHON_APPLICATIONINSIGHTS")
    env = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    env.update(
        {
            "FUNCTIONS_WORKER_RUNTIME": "python",
            "APPLICATIONINSIGHTS_CONNECTION_STRING": connection_string,
            "PYTHON_ENABLE_OPENTELEMETRY": "true",
            "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY": "true",
            "OTEL_SERVICE_NAME": "chokaq-functions-test",
            "CHOKAQ_STORAGE_URL": f"sqlite:///{db}",
            "CHOKAQ_SWEEP_SCHEDULE": "*/30 * * * * *",
            "CHOKAQ_RETENTION_SCHEDULE": "0 0 3 * * *",
            # The distro's default sampler limits traces to 5 per second and may drop the first spans
            # of a fresh process; the count below needs every span kept (a user's choice on Azure too).
            "OTEL_TRACES_SAMPLER": "always_on",
            # Keep the exporters' own bookkeeping off the network: nothing but loopback here.
            "APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL": "true",
            "PYTHONPATH": str(ROOT),
        }
    )
    return env


def run_child(case: str, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.functions.telemetry_child", case],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("case", ["host", "bare"])
def test_sweep_span_and_metric_reach_application_insights_once(
    case: str, ingestion: tuple[Ingestion, str], tmp_path: Path
) -> None:
    """host: the worker installed Azure Monitor's providers; chokaq must add none (no double export).
    bare: nobody did (PYTHON_ENABLE_OPENTELEMETRY alone only propagates context); chokaq must install
    them itself, or every span and metric is dropped."""
    got, connection_string = ingestion
    result = run_child(case, azure_settings(connection_string, tmp_path / "chokaq.db"), cwd=ROOT)
    assert result["chokaq_installed"] is (case == "bare")
    spans = got.spans("chokaq.sweep")
    assert len(spans) == 1, [e["name"] for e in got.envelopes]
    assert spans[0]["iKey"] == IKEY and spans[0]["tags"]["ai.cloud.role"] == "chokaq-functions-test"
    points = got.metric_points("chokaq.recovery.sweeps")
    assert len(points) == 1 and points[0]["value"] == 1, points
