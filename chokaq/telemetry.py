"""OpenTelemetry instruments (meter and tracer ``chokaq``) and optional exporter set-up.

Only the API is a hard dependency. ``configure()`` adds an exporter only for a signal whose global
provider is still the API's proxy (nobody installed one: not the Functions worker, not the app),
and only when Application Insights or OTLP settings say where to send it.
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
    doorbell_rings: Any
    schedules_fired: Any
    schedule_lag: Any


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
            doorbell_rings=m.create_counter(
                "chokaq.doorbell.rings", unit="{ring}", description="doorbell rings by outcome (sent, failed)"
            ),
            schedules_fired=m.create_counter(
                "chokaq.schedules.fired", unit="{job}", description="jobs enqueued by schedules, per schedule"
            ),
            schedule_lag=m.create_histogram(
                "chokaq.schedules.lag", unit="ms", description="a schedule's slot time to its job's enqueue"
            ),
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


def metrics_active() -> bool:
    """Whether a real meter provider has been installed (the API's proxy and no-op ones do not count)."""
    try:
        from opentelemetry.metrics._internal import _ProxyMeterProvider
    except ImportError:  # pragma: no cover - the API moved it
        return type(metrics.get_meter_provider()).__name__ not in ("_ProxyMeterProvider", "NoOpMeterProvider")
    return not isinstance(metrics.get_meter_provider(), (_ProxyMeterProvider, metrics.NoOpMeterProvider))


_configured = False
_reported_unexported = False


def configure(service_name: str = "chokaq") -> bool:
    """Install exporters for the signals nobody else has a provider for. Returns True if chokaq
    owns any provider (the caller then flushes after short-lived work).

    The decision is made from the providers really installed, not from environment variables:
    inside Azure Functions the Python worker installs Azure Monitor's providers itself when
    ``PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY=true`` (``PYTHON_ENABLE_OPENTELEMETRY`` alone only
    propagates context), and a second exporter would send everything twice. When the worker did
    not install them, chokaq does, so nothing is dropped on the floor.
    """
    global _configured, _reported_unexported
    if _configured:
        return True
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    want_traces, want_metrics = not tracing_active(), not metrics_active()
    if not (want_traces or want_metrics):
        log.info("OpenTelemetry providers are installed already (Functions worker or app): chokaq adds no exporter")
        return False
    endpoint = (
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )
    if os.environ.get("APPLICATIONINSIGHTS_CONNECTION_STRING") and _configure_azure_monitor(
        service_name, traces=want_traces, metrics_=want_metrics
    ):
        _configured = True
        return True
    if not endpoint:
        if not _reported_unexported:
            _reported_unexported = True
            # DEBUG: no exporter is the normal case for a CLI command, and a normal command says
            # nothing on stderr but what was asked for.
            log.debug(
                "no OpenTelemetry exporter is configured (APPLICATIONINSIGHTS_CONNECTION_STRING or "
                "OTEL_EXPORTER_OTLP_ENDPOINT): chokaq's spans and metrics are not exported"
            )
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
    if want_metrics:
        interval_ms = int(os.environ.get("OTEL_METRIC_EXPORT_INTERVAL", "60000"))
        reader = PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=interval_ms)
        metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
    if want_traces:
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
    _configured = True
    log.info(
        "OpenTelemetry OTLP export to %s (%s)",
        endpoint,
        ", ".join(n for n, on in (("traces", want_traces), ("metrics", want_metrics)) if on),
    )
    return True


def _configure_azure_monitor(service_name: str, *, traces: bool, metrics_: bool) -> bool:
    """Application Insights through the Azure Monitor distro (extra ``chokaq[azure]``), when installed,
    for the signals that have no provider yet."""
    try:
        from azure.monitor.opentelemetry import configure_azure_monitor
    except ImportError:
        log.info(
            "APPLICATIONINSIGHTS_CONNECTION_STRING is set but azure-monitor-opentelemetry is not "
            "installed (pip install 'chokaq[azure]'); trying OTLP instead"
        )
        return False
    os.environ.setdefault("OTEL_SERVICE_NAME", service_name)
    configure_azure_monitor(
        connection_string=os.environ["APPLICATIONINSIGHTS_CONNECTION_STRING"],
        disable_tracing=not traces,
        disable_metrics=not metrics_,
        # The Functions host already ships the worker's log records to Application Insights.
        disable_logging=bool(os.environ.get("FUNCTIONS_WORKER_RUNTIME")),
    )
    log.info(
        "OpenTelemetry export to Application Insights (Azure Monitor distro): %s",
        ", ".join(n for n, on in (("traces", traces), ("metrics", metrics_)) if on),
    )
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
