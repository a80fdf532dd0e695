"""The payload gate: every payload that enters (API ``payload`` and ``payload_text``, a producer's
``app.enqueue``, the CLI, edits and resurrects) passes :func:`check_payload_text`, and reading a
stored one never fails (:func:`readable`).

What passes can always be sent back out as JSON by any reader:

- strict JSON: no ``NaN``/``Infinity``, no number that overflows a float;
- valid Unicode: no lone surrogate (``"\\udfff"``), no NUL, in values and keys;
- nested at most ``MAX_PAYLOAD_DEPTH`` (64) deep: deeper documents break JSON encoders and
  response serialisers (pydantic gives up near 255 levels, Python's json near 1,000);
- at most ``MAX_PAYLOAD_BYTES`` of UTF-8.

The common payload (small, no ``\\u`` escapes, few brackets) costs one ``json.loads`` and two
string scans; only a payload that could break a rule is walked.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import BaseModel

from chokaq.domain import limits
from chokaq.domain.errors import JobValidationError

PREVIEW_CHARS = 2000
# A \u escape that may decode to NUL or to a surrogate (a pair is fine; a lone one is not).
_RISKY_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (use null or a string)")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is too large for a float")
    return value


def _bad_string(s: str) -> str | None:
    if "\x00" in s:
        return "contains a NUL character"
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (lone surrogate)"
    return None


def _walk(value: Any) -> None:
    """Depth and string checks without recursion (a hostile document must not blow the stack)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > limits.MAX_PAYLOAD_DEPTH:
                raise JobValidationError(f"payload is nested deeper than {limits.MAX_PAYLOAD_DEPTH} levels")
            items = node.items() if isinstance(node, dict) else ((None, v) for v in node)
            for k, v in items:
                if k is not None and (problem := _bad_string(k)):
                    raise JobValidationError(f"payload: a key {problem}")
                stack.append((v, depth + 1))
        elif isinstance(node, str) and (problem := _bad_string(node)):
            raise JobValidationError(f"payload: a string {problem}")


def parse_payload_text(text: str, *, max_bytes: int | None = limits.MAX_PAYLOAD_BYTES) -> Any:
    """Check raw JSON text against the gate and return the parsed value (``max_bytes=None``: any
    size, for reading what an earlier limit let in)."""
    if not isinstance(text, str):
        raise JobValidationError("payload text must be a string")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise JobValidationError("payload is not valid Unicode (lone surrogate)") from None
    if max_bytes is not None and size > max_bytes:
        raise JobValidationError(f"payload is {size} bytes; the limit is {max_bytes} UTF-8 bytes")
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise JobValidationError(f"payload is nested deeper than {limits.MAX_PAYLOAD_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, overflow, int digit limit
        raise JobValidationError(f"payload is not valid JSON: {exc}") from None
    if text.count("[") + text.count("{") > limits.MAX_PAYLOAD_DEPTH or _RISKY_ESCAPE.search(text):
        _walk(value)
    return value


def check_payload_text(text: str) -> str:
    """Validate raw JSON text supplied by a user (CLI, API, edits); returns it unchanged."""
    parse_payload_text(text)
    return text


def encode_payload(payload: Any) -> str:
    """Serialise a payload to compact JSON and pass it through the gate."""
    if isinstance(payload, BaseModel):
        text = payload.model_dump_json()
    else:
        try:
            text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except RecursionError:
            raise JobValidationError(f"payload is nested deeper than {limits.MAX_PAYLOAD_DEPTH} levels") from None
        except (TypeError, ValueError) as exc:
            raise JobValidationError(f"payload is not JSON-serialisable: {exc}") from exc
    return check_payload_text(text)


def check_payload_size(text: str) -> None:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limits.MAX_PAYLOAD_BYTES:
        raise JobValidationError(f"payload is {size} bytes; the limit is {limits.MAX_PAYLOAD_BYTES} UTF-8 bytes")


def safe_preview(text: str | None, limit: int = PREVIEW_CHARS) -> str:
    """A printable, storable, serialisable prefix of any stored text."""
    s = (text or "")[:limit]
    s = s.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")
    return s + ("…" if text is not None and len(text) > limit else "")


def readable(text: str | None) -> tuple[Any, str | None]:
    """A stored payload for display: ``(value, None)`` when it passes the gate, else a truncated
    preview string and the reason. A row written by an older version or by hand never breaks a
    list, the inspector or a purge."""
    if text is None:
        return None, "the payload is missing"
    try:
        return parse_payload_text(text, max_bytes=None), None
    except JobValidationError as exc:
        return safe_preview(text), str(exc)
