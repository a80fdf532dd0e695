"""Run in a fresh process by test_telemetry.py (OpenTelemetry's global providers can be set once per
process): optionally do what the Functions Python worker does at start-up with
PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY=true (install Azure Monitor's providers), then index
function_app.py as the worker does and invoke the sweep timer through azure.functions objects.

Prints one JSON line: whether chokaq installed providers of its own."""

from __future__ import annotations

import json
import sys


def main(case: str) -> None:
    import os

    if case == "host":
        # What the worker does before indexing; the distro reads the same connection string.
        from azure.monitor.opentelemetry import configure_azure_monitor

        configure_azure_monitor(
            connection_string=os.environ["APPLICATIONINSIGHTS_CONNECTION_STRING"], disable_offline_storage=True
        )

    from azure.functions.timer import TimerRequest

    from chokaq import ChokaQ, telemetry

    bootstrap = ChokaQ()
    bootstrap.storage.upgrade()
    bootstrap.close()

    import function_app  # indexing, as the worker does it

    functions = {f.get_function_name(): f.get_user_function() for f in function_app.app.get_functions()}
    functions["sweep"](TimerRequest(past_due=False))
    if case == "host":
        # The host's providers export on their own schedule and at shutdown; end the "process" now.
        from opentelemetry import metrics, trace

        for provider in (trace.get_tracer_provider(), metrics.get_meter_provider()):
            provider.force_flush()  # type: ignore[attr-defined]
    # chokaq's own providers (case "bare") were flushed by the sweep function itself.
    print(json.dumps({"chokaq_installed": telemetry._configured}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
