"""A job's step journal (``ctx.step``): what a step is, its bounds, and the errors a handler meets.

A step's start and its completion are written before the handler goes on, fenced by the worker and
the attempt that hold the job, so after a crash the journal says which steps finished (their
results are replayed, they never run again), which started and never confirmed (unknown: the
handler decides), and which were not reached.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from chokaq.domain.errors import ChokaQError

MAX_STEP_NAME_LEN: Final = 200
# A step's result is evidence and a value to replay, not a data store: small JSON.
MAX_STEP_RESULT_CHARS: Final = 16_000
# Steps of one job: the journal is read whole when a later attempt replays it.
MAX_STEPS_PER_JOB: Final = 1_000

STARTED: Final = 0
DONE: Final = 1
# Its body raised: the handler saw the step fail, so a later attempt runs it again (a crash, by
# contrast, leaves it started: nobody saw how it ended).
FAILED: Final = 2

StepState = Literal["started", "done", "failed"]
# What a resurrect does with the journal of the job it brings back.
ResurrectSteps = Literal["resume", "scratch"]
RESURRECT_STEPS: Final[tuple[str, ...]] = ("resume", "scratch")
# What a handler's verify(payload, steps) says of a zombie (runtime/verify.py).
Verdict = Literal["done", "not_done", "unknown"]
VERDICTS: Final[tuple[str, ...]] = ("done", "not_done", "unknown")


class StepError(ChokaQError):
    """A step could not be recorded or replayed."""


class StepInputError(StepError, ValueError):
    """A bad step name or result: nothing was written."""


class StepOwnershipLost(StepError):
    """The job is no longer this worker's at this attempt (a sweep, a cancel or another worker took
    it): the step was not recorded, and the handler is cancelled."""


class StepOutcomeUnknown(StepError):
    """This step started in an earlier attempt and never confirmed: it may or may not have had its
    effect. Nothing runs it again silently: check the outside world, then ``mark_done(result)``
    or ``run_again()`` on :attr:`step`."""

    def __init__(self, step: Any, record: StepRecord) -> None:
        self.step = step
        self.record = record
        super().__init__(
            f"step {record.name!r} started in attempt {record.attempt} on worker {record.worker_id} "
            f"at {record.started_at_utc} and never confirmed: its outcome is unknown"
        )


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One row of the journal. ``result`` is the JSON text recorded (None: no result)."""

    name: str
    attempt: int
    worker_id: str
    state: StepState
    started_at_utc: datetime | None
    done_at_utc: datetime | None
    result: str | None

    def value(self) -> Any:
        return None if self.result is None else json.loads(self.result)


def check_name(name: object) -> str:
    if not isinstance(name, str):
        raise StepInputError(f"a step name is a string, not {type(name).__name__}")
    if not name or not name.strip():
        raise StepInputError("a step name must not be empty")
    if len(name) > MAX_STEP_NAME_LEN:
        raise StepInputError(f"a step name is at most {MAX_STEP_NAME_LEN} characters (this one has {len(name)})")
    if name != name.strip():
        # SQL Server ignores trailing spaces in comparisons: "a" and "a " would be one key there.
        raise StepInputError("a step name must not start or end with whitespace")
    if "\x00" in name:
        raise StepInputError("a step name must not contain NUL")
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in name):
        # No driver encodes one: the write would fail with the driver's codec error instead.
        raise StepInputError("a step name must be valid Unicode (no lone surrogate)")
    return name


def encode_result(value: Any) -> str | None:
    """The JSON text to record for a step's result (None for None), or :class:`StepInputError`."""
    if value is None:
        return None
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise StepInputError(f"a step result must be JSON (dict, list, str, number, bool, None): {exc}") from None
    if len(text) > MAX_STEP_RESULT_CHARS:
        raise StepInputError(
            f"a step result is at most {MAX_STEP_RESULT_CHARS} characters of JSON (this one has {len(text)}): "
            "record a reference (an id, a URL), not the data"
        )
    if "\x00" in text or any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
        raise StepInputError("a step result must be storable text (no NUL, no lone surrogates)")
    return text


_STATE_NAMES: Final[dict[int, StepState]] = {STARTED: "started", DONE: "done", FAILED: "failed"}


def state_name(state: int) -> StepState:
    return _STATE_NAMES.get(int(state), "started")


__all__ = [
    "MAX_STEPS_PER_JOB",
    "MAX_STEP_NAME_LEN",
    "MAX_STEP_RESULT_CHARS",
    "RESURRECT_STEPS",
    "ResurrectSteps",
    "StepError",
    "StepInputError",
    "StepOutcomeUnknown",
    "StepOwnershipLost",
    "StepRecord",
    "Verdict",
    "check_name",
    "encode_result",
]
