"""What a running handler says about itself: its log lines and its progress.

A handler calls ``ctx.log(message, **fields)`` and ``ctx.progress(done, total, note)``, and the
records of the standard ``logging`` module it emits are captured too (runtime/job_log_capture.py).
They go to a :class:`JobNotes` buffer in the worker's memory, made on the first line (a handler
that says nothing costs nothing), and reach the job's row with statements the worker already sends:
its heartbeat, and the statement that ends the attempt (archive, retry, DLQ). Never one statement
per line.

Stored as ASCII JSON (control characters and lone surrogates travel escaped), redacted like error
text (:func:`~chokaq.domain.attempts.bounded_text`), and bounded: each line capped, the lines kept
by count and by stored characters, the oldest dropped first and counted (``dropped``).

``Logs``: ``{"attempt": n, "worker": w, "dropped": k, "lines": [{"t", "l", "n"?, "m", "f"?}, ...]}``
(``t`` epoch milliseconds, ``l`` level, ``n`` logger, ``m`` message, ``f`` fields): the latest
attempt that said anything. ``Progress``: ``{"done", "total"?, "note"?, "t"}``.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from numbers import Real
from typing import Any

from chokaq.domain.attempts import bounded_text

MAX_LINE_CHARS = 2_000  # one message, before escaping
MAX_FIELD_CHARS = 200  # one field's value
MAX_FIELDS = 20
MAX_NOTE_CHARS = 200  # a progress note
MAX_PROGRESS_CHARS = 3_900  # a stored Progress (the column holds 4,000)
MAX_ENCODED_LINE = 12_000  # one line as stored, escapes included: past it, its message is cut shorter
_NAME = re.compile(r"\w{1,64}")  # a field's name: nothing to redact or escape
_DOTTED = re.compile(r"[\w.\-]{1,200}")  # a logger's name, likewise
# What a stored value holds besides its lines (attempt, worker id, counters): kept free in the bound.
_HEAD_RESERVE = 400


@dataclass(frozen=True)
class LogLimits:
    """Execution.JobLogLevel, .JobLogMaxLines and .JobLogMaxChars, shared by every job of a worker."""

    level: int = 20  # logging.INFO
    max_lines: int = 1_000
    max_chars: int = 64_000  # a stored Logs value, at most


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


def _field(key: str, value: Any) -> Any:
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    text = value if isinstance(value, str) else _safe_repr(value)
    if _NAME.fullmatch(key):
        # Redacted as the text "key=value": a field named like a secret (token, password) is masked.
        return bounded_text(f"{key}={text}", MAX_FIELD_CHARS + len(key) + 1)[len(key) + 1 :]
    return bounded_text(text, MAX_FIELD_CHARS)


def _plain(text: str, limit: int) -> str:
    """``text`` as stored: a plain name (a level, a logger, a field) as it is, else capped and redacted."""
    plain = len(text) <= limit and (_NAME.fullmatch(text) or _DOTTED.fullmatch(text))
    return text if plain else bounded_text(text, limit)


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as exc:  # a hostile __repr__ must not fail the handler's log call
        return f"<unrepresentable {type(value).__name__}: {type(exc).__name__}>"


def encode_line(level: str, message: str, fields: dict[str, Any] | None, logger: str | None = None) -> str:
    """One line as stored: capped, redacted, escaped."""
    line: dict[str, Any] = {"t": int(time.time() * 1000), "l": _plain(level, 40)}
    if logger:
        line["n"] = _plain(logger, MAX_FIELD_CHARS)
    line["m"] = bounded_text(message, MAX_LINE_CHARS)
    if fields:
        items = list(fields.items())
        kept = {(name := _plain(str(k), 64)): _field(name, v) for k, v in items[:MAX_FIELDS]}
        if len(items) > MAX_FIELDS:
            kept["…"] = f"{len(items) - MAX_FIELDS} more fields cut"
        line["f"] = kept
    encoded = _dumps(line)
    if len(encoded) > MAX_ENCODED_LINE:  # text that escapes many times over (emoji: 12 characters each)
        line.pop("f", None)
        line["m"] = bounded_text(message, MAX_LINE_CHARS // 8) + " [line cut: too long once escaped]"
        encoded = _dumps(line)
    return encoded


@dataclass(frozen=True, slots=True)
class Notes:
    """A job's stored ``Logs`` and ``Progress`` values to write (None: leave the column as it is), as
    the worker's statements bind them (chokaq.storage.job_notes)."""

    logs: str | None = None
    progress: str | None = None

    def bind(self, params: dict[str, Any]) -> tuple[bool, bool]:
        """Add this job's values to ``params`` (``logs``, ``progress``); which of them it has."""
        if self.logs is not None:
            params["logs"] = self.logs
        if self.progress is not None:
            params["progress"] = self.progress
        return self.logs is not None, self.progress is not None


class JobNotes:
    """One running job's log lines and progress, not yet all written. Thread-safe: a plain handler
    writes from its own thread while the worker's loop takes snapshots."""

    __slots__ = (
        "_attempt",
        "_budget",
        "_dropped",
        "_limits",
        "_lines",
        "_lock",
        "_progress",
        "_size",
        "_version_logs",
        "_version_progress",
        "_worker",
        "_written_logs",
        "_written_progress",
    )

    def __init__(self, limits: LogLimits, attempt: int, worker: str) -> None:
        self._limits = limits
        self._budget = max(1_000, limits.max_chars - _HEAD_RESERVE)
        self._attempt = attempt
        self._worker = _plain(worker, 200)
        self._lock = threading.Lock()
        self._lines: deque[str] = deque()
        self._size = 0  # characters of the kept lines, with their separators
        self._dropped = 0
        self._progress: str | None = None
        # Versions: what has changed since the row last got it (a write in flight may race new lines).
        self._version_logs = self._written_logs = 0
        self._version_progress = self._written_progress = 0

    def add(self, encoded: str) -> None:
        """A line made by :func:`encode_line`; the oldest lines go when the bounds are passed."""
        if len(encoded) > self._budget // 4:  # one line never crowds out all the others
            encoded = encode_line("WARNING", f"a log line of {len(encoded)} characters was cut", None)
        with self._lock:
            self._lines.append(encoded)
            self._size += len(encoded) + 1
            while len(self._lines) > 1 and (len(self._lines) > self._limits.max_lines or self._size > self._budget):
                self._size -= len(self._lines.popleft()) + 1
                self._dropped += 1
            self._version_logs += 1

    def set_progress(self, done: float, total: float | None = None, note: str | None = None) -> None:
        value: dict[str, Any] = {"done": _number(done, "done")}
        if total is not None:
            value["total"] = _number(total, "total")
        if note is not None:
            value["note"] = bounded_text(str(note), MAX_NOTE_CHARS)
        value["t"] = int(time.time() * 1000)
        text = _dumps(value)
        if len(text) > MAX_PROGRESS_CHARS:  # the column's width (a note of 200 escapes to ~2,800 at most)
            value.pop("note", None)
            text = _dumps(value)
        with self._lock:
            self._progress = text
            self._version_progress += 1

    def unwritten(self) -> tuple[str | None, str | None, tuple[int, int]]:
        """``(logs, progress, mark)``: the stored values of what changed since the last
        :meth:`written` (None: unchanged); ``mark`` goes to :meth:`written` once the row has them."""
        with self._lock:
            logs = None
            if self._version_logs != self._written_logs:
                head = _dumps({"attempt": self._attempt, "worker": self._worker, "dropped": self._dropped})
                logs = head[:-1] + ',"lines":[' + ",".join(self._lines) + "]}"
            progress = self._progress if self._version_progress != self._written_progress else None
            return logs, progress, (self._version_logs, self._version_progress)

    def written(self, mark: tuple[int, int]) -> None:
        """The row has the values :meth:`unwritten` gave with ``mark``."""
        with self._lock:
            self._written_logs = max(self._written_logs, mark[0])
            self._written_progress = max(self._written_progress, mark[1])


def _number(value: Any, name: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"progress {name} must be a number, not {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"progress {name} must be a finite number >= 0, not {value!r}")
    return int(value) if isinstance(value, int) else number


# ---------------------------------------------------------------------------- reading


def parse_logs(stored: str | None) -> dict[str, Any] | None:
    """A stored ``Logs`` value; None when there is none or it does not parse (evidence, never a
    reason for a read to fail)."""
    value = _loads(stored)
    if not isinstance(value, dict) or not isinstance(value.get("lines"), list):
        return None
    lines = [line for line in value["lines"] if isinstance(line, dict)]
    return {
        "attempt": value.get("attempt") if isinstance(value.get("attempt"), int) else None,
        "worker": value.get("worker") if isinstance(value.get("worker"), str) else None,
        "dropped": value.get("dropped") if isinstance(value.get("dropped"), int) else 0,
        "lines": [
            {
                "at_ms": line.get("t") if isinstance(line.get("t"), int) else None,
                "level": str(line.get("l", "")),
                "logger": line.get("n") if isinstance(line.get("n"), str) else None,
                "message": str(line.get("m", "")),
                "fields": line.get("f") if isinstance(line.get("f"), dict) else None,
            }
            for line in lines
        ],
    }


def parse_progress(stored: str | None) -> dict[str, Any] | None:
    value = _loads(stored)
    if not isinstance(value, dict) or not isinstance(value.get("done"), int | float):
        return None
    total = value.get("total")
    note = value.get("note")
    return {
        "done": value["done"],
        "total": total if isinstance(total, int | float) else None,
        "note": note if isinstance(note, str) else None,
        "at_ms": value.get("t") if isinstance(value.get("t"), int) else None,
    }


def _loads(stored: str | None) -> Any:
    if not stored:
        return None
    try:
        return json.loads(stored)
    except ValueError:
        return None
