"""chokaq: SQL-backed background jobs with heartbeats, zombie rescue and a safe DLQ workflow."""

from chokaq.domain.breakers import BreakerPolicy
from chokaq.domain.errors import ConflictError, FatalError, JobValidationError, NotFoundError, ThrottledError
from chokaq.domain.models import Enqueued
from chokaq.domain.states import FailureReason, JobStatus
from chokaq.domain.steps import StepError, StepInputError, StepOutcomeUnknown, StepOwnershipLost
from chokaq.runtime.app import ChokaQ
from chokaq.runtime.handlers import JobContext
from chokaq.runtime.job_handle import JobHandle
from chokaq.settings import ChokaQSettings, load_settings

__all__ = [
    "BreakerPolicy",
    "ChokaQ",
    "ChokaQSettings",
    "ConflictError",
    "Enqueued",
    "FailureReason",
    "FatalError",
    "JobContext",
    "JobHandle",
    "JobStatus",
    "JobValidationError",
    "NotFoundError",
    "StepError",
    "StepInputError",
    "StepOutcomeUnknown",
    "StepOwnershipLost",
    "ThrottledError",
    "load_settings",
]
__version__ = "0.1.0"
