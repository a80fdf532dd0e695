from __future__ import annotations


class ChokaQError(Exception):
    """Base class for errors raised by chokaq itself."""


class FatalError(ChokaQError):
    """Raise from a handler when retrying cannot help: the job goes to the DLQ at once."""


class ThrottledError(ChokaQError):
    """Raise from a handler when a dependency asks to come back later.

    The job is retried after ``retry_after`` seconds (it still uses up an attempt).
    """

    def __init__(self, message: str = "throttled", *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = float(retry_after)


class JobValidationError(ChokaQError, ValueError):
    """Input to enqueue or an edit breaks a limit or is not valid JSON."""


class NotFoundError(ChokaQError, LookupError):
    """No job with that id where it was looked for."""


class ConflictError(ChokaQError):
    """The job is not in a state that allows the change (owned by a worker, already moved, ...)."""


class ConfigurationError(ChokaQError, ValueError):
    """Settings that must not be used to start."""
