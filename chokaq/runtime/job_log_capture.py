"""Records of the standard ``logging`` module emitted inside a running handler, kept with its job.

Captured where records are made (the process's log record factory, wrapped once by the first
worker), not by a handler on the root logger: a root handler would silence Python's last-resort
output of warnings in a process that never configured logging, and turn a later
``logging.basicConfig()`` into a no-op. A record is kept only when the context it is made in carries
a job: the worker sets
:data:`CURRENT_JOB` around the handler's call alone, in the handler's task (an async handler) or in
the context its thread runs in (a plain function, see execution.py), so a record goes to the job whose
handler emitted it however many run at once, and the worker's own records (before or after the
handler) never do. Tasks and threads the handler starts with its context carry the job too.

chokaq's own records (loggers ``chokaq`` and ``chokaq.*``) are never kept, even inside a handler:
chokaq's code runs in the handler's context when a thread handler records a step or resolves one
(``with ctx.step``), and what it logs there (a transient database error replayed) is the
operator's concern, in the process's log, not a line the handler wrote.

Only records a logger lets through are made at all: a logger (or the root) set above
Execution.JobLogLevel keeps its records from the job as from every handler.
"""

from __future__ import annotations

import logging
import threading
from contextvars import ContextVar
from typing import Any

from chokaq.domain.job_logs import encode_line
from chokaq.runtime.handlers import JobContext

# The job whose handler runs in this context (None: chokaq's own code, or no worker).
CURRENT_JOB: ContextVar[JobContext | None] = ContextVar("chokaq_current_job", default=None)

_INSTALL_LOCK = threading.Lock()


class JobLogHandler(logging.Handler):
    """Keeps each record emitted inside a running handler with that handler's job (called by the
    record factory below as each record is made; usable as a handler too)."""

    def emit(self, record: logging.LogRecord) -> None:
        ctx = CURRENT_JOB.get()
        if ctx is None or _chokaqs_own(record.name):
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


def _chokaqs_own(logger: str) -> bool:
    return logger.startswith("chokaq") and (len(logger) == 6 or logger[6] == ".")


_handler = JobLogHandler()
_installed = False


def install() -> None:
    """Wrap the log record factory, once per process (idempotent; outside a running handler the
    wrapper only reads a context variable)."""
    global _installed
    with _INSTALL_LOCK:
        if _installed:
            return
        make = logging.getLogRecordFactory()

        def capturing(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = make(*args, **kwargs)
            if CURRENT_JOB.get() is not None:
                _handler.emit(record)
            return record

        logging.setLogRecordFactory(capturing)
        _installed = True
