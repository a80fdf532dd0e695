"""Azure Functions entry point (Python v2 programming model).

The admin API (HTTP), the recovery sweep and retention timers, and optionally a time-boxed drain
worker, on a timer and/or on the doorbell queue (``wake``). The handlers come from CHOKAQ_APP
(``pkg.module:app``); without it, a bare app (API, sweep and retention only). ``chokaq`` is
imported from this directory, which is deployed as it is. See docs/functions.md.
"""

from functions import build_function_app

app = build_function_app()
