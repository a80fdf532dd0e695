"""``chokaq job show --logs``: a job's attempts, step journal, progress and log lines as text for a
terminal.

Every character a job supplied that a terminal would act on (escape sequences, other controls,
direction overrides) is printed as a visible escape, so a hostile log line cannot rewrite the
screen or hide what follows it."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

from chokaq.operations.job_out import JobOut, StepOut

# C0 and C1 controls but newline, and the bidi overrides and isolates.
_HIDDEN = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    return _HIDDEN.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _clock(ms: int | None) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M:%S.%f")[:-3] if ms is not None else "-"


# A step's result as printed: a glance, the full value is in `chokaq job show` (JSON).
_RESULT_CHARS = 200
_STATES = {"done": "done", "started": "started, never confirmed (outcome unknown)", "failed": "failed (runs again)"}


def _step(s: StepOut) -> str:
    when = " → ".join(x[:19].replace("T", " ") for x in (s.started_utc, s.done_utc) if x)
    line = f"  {s.name}: {_STATES.get(s.state, s.state)} · attempt {s.attempt} on {s.worker}"
    if when:
        line += f" · {when}"
    if s.result is not None:
        result = json.dumps(s.result, ensure_ascii=False)
        line += f" · {result[:_RESULT_CHARS]}{'...' if len(result) > _RESULT_CHARS else ''}"
    return visible(line)


def render(job: JobOut) -> list[str]:
    """The job's attempts, step journal, progress and log lines, one string a line."""
    out = [visible(f"job {job.id} ({job.type}) in {job.location}{f' · {job.status}' if job.status else ''}")]
    for a in job.attempts or []:
        error = ": ".join(x for x in (a.error_type, a.message) if x)
        out.append(visible(f"attempt {a.attempt}: {a.outcome}{f' on {a.worker}' if a.worker else ''} {error}".rstrip()))
    if job.steps is not None:  # a job's own read has its journal (docs/steps.md)
        out.append("steps:" if job.steps else "steps: none recorded")
        out += [_step(s) for s in job.steps]
    if job.progress is not None:
        p = job.progress
        of = f" of {p.total:g}" if p.total is not None else ""
        out.append(visible(f"progress: {p.done:g}{of}{f' · {p.note}' if p.note else ''}"))
    logs = job.logs
    if logs is None:
        out.append("logs: none")
        return out
    out.append(visible(f"logs of attempt {logs.attempt} on {logs.worker or '?'}:"))
    if logs.dropped:
        out.append(f"  ... {logs.dropped} earlier line(s) dropped ...")
    for line in logs.lines:
        fields = "".join(f" {k}={json.dumps(v, ensure_ascii=False)}" for k, v in (line.fields or {}).items())
        logger = f" {line.logger}" if line.logger else ""
        text = f"{_clock(line.at_ms)} {line.level}{logger} {line.message}{fields}"
        out.append("  " + visible(text).replace("\n", "\n    "))
    return out
