"""A job this worker has started and not yet finalised: its record, lease, context and the task
(and, for a plain function, the thread) running its handler."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from chokaq.domain.models import JobRecord, Lease
from chokaq.runtime.handlers import JobContext


@dataclass
class Running:
    record: JobRecord
    lease: Lease
    ctx: JobContext
    task: asyncio.Task[Any] | None = None
    thread: Future[Any] | None = None
    started: float = field(default_factory=time.monotonic)
    traced: bool = False

