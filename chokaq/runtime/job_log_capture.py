"""Records of the standard ``logging`` module emitted inside a running handler, kept with its job.

One :class:`JobLogHandler` on the root logger, installed once per process by the first worker.
It keeps a record only when the context it is emitted in carries a job: the worker sets
:data:`CURRENT_JOB` around the handler's call alone, in the handler's task (an async handler) or in
the context its thread runs in (a plain function, see execution.py), so a record goes to the job whose
handler emitted it however many run at once, and the worker's own records (before or after the
handler) never do. Tasks and threads the handler starts with its context carry the job too.

Only records a logger lets through reach the handler: a logger (or the root) set above
Execution.JobLogLevel keeps its records from the job as from every other handler.
"""

from __future__ import annotations

import logging
import threading
from contextvars import ContextVar

from chokaq.domain.job_logs import encode_line
from chokaq.runtime.handlers import JobContext

# The job whose handler runs in this context (None: chokaq's own code, or no worker).
CURRENT_JOB: ContextVar[JobContext | None] = ContextVar("chokaq_current_job", default=None)

_INSTALL_LOCK = threading.Lock()


class JobLogHandler(logging.Handler):
    """Keeps each record emitted inside a running handler with that handler's job."""

    def emit(self, record: logging.LogRecord) -> None:
        ctx = CURRENT_JOB.get()
        if ctx is None:
            return
        limits = ctx._log_limits
        if limits is not None and record.levelno < limits.level:
            return
        try:
            message = record.getMessage()
            if record.exc_info and record.exc_info[0] is not None:
                # Its traceback's end names the failing line; the line bound keeps both ends.
                message = f"{message}\n{logging.Formatter().formatException(record.exc_info)}"
            ctx.notes().add(encode_line(record.levelname, message, None, record.name))
        except Exception:
            # Capturing must never fail the handler's own logging call, nor log about itself.
            return


_handler = JobLogHandler()


def install() -> None:
    """Put the capturing handler on the root logger, once (idempotent; it stays: outside a running
    handler it returns at once)."""
    root = logging.getLogger()
    with _INSTALL_LOCK:
        if _handler not in root.handlers:
            root.addHandler(_handler)
