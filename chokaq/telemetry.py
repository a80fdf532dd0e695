"""OpenTelemetry instruments (meter and tracer ``chokaq``) and optional exporter set-up.

Only the API is a hard dependency. Nothing is exported unless ``configure()`` finds OTEL settings
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or the metrics/traces specific variants) and the SDK is installed.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics, trace

log = logging.getLogger("chokaq.telemetry")

METER_NAME = "chokaq"


@dataclass
class Instruments:
    enqueued: Any
    completed: Any
    failed: Any
    dlq: Any
    retried: Any
    heartbeat_failures: Any
    state_transition_conflicts: Any
    processing_duration: Any
    queue_lag: Any
    workers_active: Any
    sweeps: Any


_instruments: Instruments | None = None


def instruments() -> Instruments:
    """Created on first use so that a provider configured later still receives them."""
    global _instruments
    if _instruments is None:
        m = metrics.get_meter(METER_NAME)
        _instruments = Instruments(
            enqueued=m.create_counter("chokaq.jobs.enqueued", unit="{job}", description="jobs stored"),
            completed=m.create_counter("chokaq.jobs.completed", unit="{job}", description="jobs archived"),
            failed=m.create_counter("chokaq.jobs.failed", unit="{job}", description="handler failures"),
            dlq=m.create_counter("chokaq.jobs.dlq", unit="{job}", description="jobs moved to the DLQ"),
            retried=m.create_counter("chokaq.jobs.retried", unit="{job}", description="jobs scheduled again"),
            heartbeat_failures=m.create_counter(
                "chokaq.jobs.heartbeat_failures", unit="{job}", description="failed heartbeat writes, per job"
            ),
            state_transition_conflicts=m.create_counter(
                "chokaq.jobs.state_transition_conflicts",
                unit="{move}",
                description="worker moves refused because the worker no longer owned the job",
            ),
            processing_duration=m.create_histogram(
                "chokaq.jobs.processing_duration", unit="ms", description="handler run time"
            ),
            queue_lag=m.create_histogram("chokaq.jobs.queue_lag", unit="ms", description="due time to start"),
            workers_active=m.create_up_down_counter("chokaq.workers.active", unit="{worker}"),
            sweeps=m.create_counter("chokaq.recovery.sweeps", unit="{sweep}", description="recovery sweeps run"),
        )
    return _instruments


_tracer: trace.Tracer | None = None


def tracer() -> trace.Tracer:
    """One tracer for the process; before a provider is set it is a proxy that follows it later."""
    global _tracer
    if _tracer is None:
        _tracer = trace.get_tracer(METER_NAME)
    return _tracer


def tracing_active() -> bool:
    """Whether spans go anywhere: a real tracer provider has been installed (by us, the Azure
    Monitor distro or the Functions host). Checked per job, so one installed later counts."""
    return not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


_configured = False


def configure(service_name: str = "chokaq") -> bool:
    """Wire the OTLP/HTTP exporters when OTEL env vars ask for it. Returns True if it did.

    Inside Azure Functions with ``PYTHON_ENABLE_OPENTELEMETRY=true`` the host's worker already
    owns the global providers; installing ours too would export everything twice.
    """
    global _configured
    if _configured:
        return True
    endpoint = (
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    host_managed = os.environ.get("PYTHON_ENABLE_OPENTELEMETRY", "").lower() == "true" and bool(
        os.environ.get("FUNCTIONS_WORKER_RUNTIME")
    )
    if host_managed and os.environ.get("CHOKAQ_OTEL_FORCE", "").lower() != "true":
        log.info("OpenTelemetry is configured by the Functions host; chokaq will not add exporters")
        return False
    if os.environ.get("APPLICATIONINSIGHTS_CONNECTION_STRING") and _configure_azure_monitor(service_name):
        _configured = True
        return True
    if not endpoint:
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but the SDK is missing: pip install 'chokaq[otel]'")
        return False
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service_name)})
    interval_ms = int(os.environ.get("OTEL_METRIC_EXPORT_INTERVAL", "60000"))
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=interval_ms)
    metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _configured = True
    log.info("OpenTelemetry OTLP export to %s", endpoint)
    return True


def _configure_azure_monitor(service_name: str) -> bool:
    """Application Insights through the Azure Monitor distro (extra ``chokaq[azure]``), when installed."""
    try:
        from azure.monitor.opentelemetry import configure_azure_monitor
    except ImportError:
        log.info(
            "APPLICATIONINSIGHTS_CONNECTION_STRING is set but azure-monitor-opentelemetry is not "
            "installed (pip install 'chokaq[azure]'); trying OTLP instead"
        )
        return False
    os.environ.setdefault("OTEL_SERVICE_NAME", service_name)
    configure_azure_monitor(connection_string=os.environ["APPLICATIONINSIGHTS_CONNECTION_STRING"])
    log.info("OpenTelemetry export to Application Insights (Azure Monitor distro)")
    return True


def shutdown() -> None:
    """Flush exporters (a short-lived CLI run or sweep would otherwise lose its data)."""
    for provider in (metrics.get_meter_provider(), trace.get_tracer_provider()):
        flush = getattr(provider, "force_flush", None)
        if flush is not None:
            try:
                flush()
            except Exception:  # pragma: no cover - best effort at exit
                log.debug("flush failed", exc_info=True)
