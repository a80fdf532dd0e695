"""OpenTelemetry over a real socket: a worker and a sweep export to a small OTLP/HTTP receiver."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from chokaq.domain.models import EnqueueRequest
from chokaq.storage import Storage
from tests.acceptance.conftest import run_cli
from tests.helpers import counts, wait_for


class Receiver:
    def __init__(self) -> None:
        self.metrics: set[str] = set()
        self.spans: set[str] = set()
        self.services: set[str] = set()
        self.lock = threading.Lock()


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    got = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with got.lock:
                if self.path == "/v1/metrics":
                    req: Any = ExportMetricsServiceRequest.FromString(body)
                    for rm in req.resource_metrics:
                        got.services.update(
                            a.value.string_value for a in rm.resource.attributes if a.key == "service.name"
                        )
                        for sm in rm.scope_metrics:
                            got.metrics.update(m.name for m in sm.metrics)
                elif self.path == "/v1/traces":
                    req = ExportTraceServiceRequest.FromString(body)
                    for rs in req.resource_spans:
                        for ss in rs.scope_spans:
                            got.spans.update(s.name for s in ss.spans)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield got, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_worker_and_sweep_export_metrics_and_spans(
    sqlite_url: str, tmp_path: Path, workers: Any, receiver: tuple[Receiver, str]
) -> None:
    got, endpoint = receiver
    otel = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_METRIC_EXPORT_INTERVAL": "300",
        "OTEL_SERVICE_NAME": "chokaq-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    s = Storage(sqlite_url)
    s.upgrade()
    s.enqueue_many([EnqueueRequest(type="record") for _ in range(5)])
    proc = workers(sqlite_url, tmp_path / "record.txt", **otel)
    wait_for(lambda: counts(s).get("archive") == 5)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    swept = run_cli(sqlite_url, "sweep", **otel)
    assert swept.returncode == 0, swept.stderr
    with got.lock:
        assert {
            "chokaq.jobs.completed",
            "chokaq.jobs.processing_duration",
            "chokaq.jobs.queue_lag",
            "chokaq.workers.active",
            "chokaq.recovery.sweeps",
        } <= got.metrics, got.metrics
        assert {"chokaq.job record", "chokaq.sweep"} <= got.spans, got.spans
        assert got.services == {"chokaq-test"}
