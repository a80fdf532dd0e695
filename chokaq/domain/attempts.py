"""A job's attempt history: one entry per attempt that did not succeed, and per resurrect.

Stored as JSON text in the ``Attempts`` column of the job's row, which travels with the job from
JobsHot to JobsArchive or JobsDLQ and back. The worker composes the new list in memory and binds it
into the statement that already moves the job, so recording an attempt costs no round trip.

Bounded: the first entry and the latest ones, :data:`MAX_ENTRIES` in all, with a count of those
dropped between them; each message and traceback capped. Text is redacted (secrets in URLs and
``key=value`` pairs) and stored as ASCII JSON, so control characters and lone surrogates travel
escaped and every database stores the same bytes.
"""

from __future__ import annotations

import json
import traceback
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import pydantic

from chokaq.redact import redact

MAX_ENTRIES = 20
MAX_MESSAGE_CHARS = 2_000
MAX_TRACEBACK_CHARS = 8_000
MAX_HISTORY_CHARS = 64_000  # the stored history in all (ASCII JSON: other text is escaped, up to 6x)
MAX_DETAILS_CHARS = 64_000  # JobsDLQ.ErrorDetails: the last failure's message and traceback

# What ended an attempt, as the inspector shows it.
RETRIED = "retried"
DEAD_LETTERED = "dead-lettered"
WORKER_LOST = "worker lost"
RESURRECTED = "resurrected"


@dataclass(frozen=True)
class ErrorParts:
    """An exception as an attempt entry keeps it."""

    type: str
    message: str
    traceback: str | None = None

    @classmethod
    def of(cls, exc: BaseException) -> ErrorParts:
        message = str(exc)
        if isinstance(exc, pydantic.ValidationError):
            message = f"payload failed validation ({exc.error_count()} errors)"
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(type(exc).__name__, message, tb)


@dataclass(frozen=True)
class Attempt:
    attempt: int
    outcome: str  # RETRIED, DEAD_LETTERED, WORKER_LOST or RESURRECTED
    ended_utc: str  # ISO 8601 UTC
    worker: str | None = None
    started_utc: str | None = None
    duration_ms: int | None = None
    reason: str | None = None  # a FailureReason label
    error_type: str | None = None
    message: str | None = None
    traceback: str | None = None
    by: str | None = None  # who resurrected

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    if moment.tzinfo is None:  # SQLite and SQL Server hand back naive UTC
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat()


def bounded_text(text: str, limit: int) -> str:
    """Error text as chokaq stores it: cut to about ``limit`` characters keeping both ends (the end
    of a traceback names the failing line), redacted, and storable everywhere (PostgreSQL refuses
    NUL in text, and no driver encodes a lone surrogate: both are written as escapes). Cut first:
    redacting megabytes is slow, and only what is kept needs it."""
    if len(text) > limit:
        half = limit // 2
        text = f"{redact(text[:half])}\n... [{len(text) - 2 * half} characters cut] ...\n{redact(text[-half:])}"
    else:
        text = redact(text)
    text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _cap(text: str | None, limit: int) -> str | None:
    return None if text is None else bounded_text(text, limit)


def failed_attempt(
    *,
    attempt: int,
    outcome: str,
    worker: str | None,
    ended: datetime,
    duration_ms: int | None,
    reason: str | None,
    error: ErrorParts | None,
) -> Attempt:
    """An attempt the worker saw end without success."""
    started = None
    if duration_ms is not None:
        started = iso(datetime.fromtimestamp(ended.timestamp() - duration_ms / 1000, UTC))
    return Attempt(
        attempt=attempt,
        outcome=outcome,
        ended_utc=iso(ended) or "",
        worker=worker,
        started_utc=started,
        duration_ms=duration_ms,
        reason=reason,
        error_type=error.type if error else None,
        message=_cap(error.message, MAX_MESSAGE_CHARS) if error else None,
        traceback=_cap(error.traceback, MAX_TRACEBACK_CHARS) if error else None,
    )


def parse(stored: str | None) -> list[dict[str, Any]]:
    """The entries in a stored ``Attempts`` value; a value that is not a JSON list reads as none
    (written by hand, say): the history is evidence, never a reason for a read to fail."""
    if not stored:
        return []
    try:
        value = json.loads(stored)
    except ValueError:
        return []
    return [e for e in value if isinstance(e, dict)] if isinstance(value, list) else []


def appended(stored: str | None, *entries: Attempt) -> str:
    """``stored`` with ``entries`` added, bounded to the first and the latest entries, and in all
    to :data:`MAX_HISTORY_CHARS` (older entries lose their tracebacks first): every claim of the
    job carries the history, so it must stay small."""
    items = parse(stored) + [e.as_json() for e in entries]
    if len(items) > MAX_ENTRIES:
        first, rest = items[0], items[1:]
        keep = rest[-(MAX_ENTRIES - 1) :]
        dropped = len(rest) - len(keep) + int(first.get("dropped_after", 0))
        first = {**first, "dropped_after": dropped}  # entries dropped between the first and the rest
        items = [first, *keep]
    text = _dumps(items)
    for i in range(len(items) - 1):  # the latest entry keeps its traceback
        if len(text) <= MAX_HISTORY_CHARS:
            break
        if "traceback" in items[i]:
            items[i] = {k: v for k, v in items[i].items() if k != "traceback"}
            text = _dumps(items)
    return text


def _dumps(items: list[dict[str, Any]]) -> str:
    return json.dumps(items, ensure_ascii=True, separators=(",", ":"))


def final_failure(
    stored: str | None,
    *,
    attempt: int,
    reason: str,
    worker: str | None,
    started: datetime | None,
    failed_at: datetime | None,
    details: str | None,
) -> Attempt | None:
    """The entry for a dead job's last attempt when its history lacks one: the sweep buries a zombie
    and an operator cancels a job in one statement over many rows, which the worker's in-memory
    history never sees. None when the history has it (the worker wrote it) or nothing ran."""
    entries = parse(stored)
    # Only entries since the last resurrect: a resurrect starts the attempts again from 0.
    since = next((i for i in range(len(entries) - 1, -1, -1) if entries[i].get("outcome") == RESURRECTED), -1)
    if attempt <= 0 or any(e.get("attempt") == attempt for e in entries[since + 1 :]):
        return None
    first_line = (details or "").split("\n", 1)[0] or None
    return Attempt(
        attempt=attempt,
        outcome=WORKER_LOST if reason == "Zombie" else DEAD_LETTERED,
        ended_utc=iso(failed_at) or "",
        worker=worker,
        started_utc=iso(started),
        reason=reason,
        message=_cap(first_line, MAX_MESSAGE_CHARS),
    )


def resurrected(by: str, at: datetime) -> Attempt:
    """An operator's resurrect: the attempts start again from 0, and the history says why."""
    return Attempt(attempt=0, outcome=RESURRECTED, ended_utc=iso(at) or "", by=by)


def timeline(
    stored: str | None,
    *,
    dead: bool,
    attempt: int,
    reason: str | None,
    worker: str | None,
    started: datetime | None,
    failed_at: datetime | None,
    details: str | None,
) -> list[dict[str, Any]]:
    """Every attempt on record, oldest first: the stored history, and for a dead job (``dead``)
    its last attempt where the history lacks it."""
    entries = parse(stored)
    if dead and reason is not None:
        final = final_failure(
            stored, attempt=attempt, reason=reason, worker=worker, started=started, failed_at=failed_at, details=details
        )
        if final is not None:
            entries.append(final.as_json())
    return entries
