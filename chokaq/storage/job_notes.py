"""A running job's log lines and progress (chokaq.domain.job_logs) as the worker's statements bind
them: a job's own values for its retry or its move to the DLQ, a ``{job id: value}`` JSON mapping
for the heartbeat and the archive of a batch (each row looks its own up). Only what changed is sent:
a statement of jobs that said nothing has the shape it had before job logs."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from chokaq.domain.job_logs import Notes

__all__ = ["Notes", "bind_many"]


def bind_many(params: dict[str, Any], notes: Iterable[tuple[str, Notes]]) -> tuple[bool, bool]:
    """Add ``job_logs`` and ``job_progress`` (JSON mappings by job id) for the jobs whose ``Notes``
    have any; which of the two any job has."""
    logs: dict[str, str] = {}
    progress: dict[str, str] = {}
    for job_id, n in notes:
        if n.logs is not None:
            logs[job_id] = n.logs
        if n.progress is not None:
            progress[job_id] = n.progress
    if logs:
        params["job_logs"] = json.dumps(logs, ensure_ascii=True)
    if progress:
        params["job_progress"] = json.dumps(progress, ensure_ascii=True)
    return bool(logs), bool(progress)
