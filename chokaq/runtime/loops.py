"""Execution.EventLoop: which event loop a worker that owns its loop (``Worker.run``, ``chokaq
worker``) runs on. A worker run on a caller's loop (``run_async``, the Functions app) uses that one.

uvloop is optional (``pip install 'chokaq[uvloop]'``): its loop, timers, task wake-ups and
thread-safe callbacks cost less per job than asyncio's own, which is most of what a worker does
between database round trips (docs/benchmarks.md)."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable
from typing import Literal

EventLoopName = Literal["asyncio", "uvloop"]


def available(name: EventLoopName) -> bool:
    return name == "asyncio" or importlib.util.find_spec(name) is not None


def loop_factory(name: EventLoopName) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory for ``asyncio.Runner`` (None: asyncio's default loop)."""
    if name == "asyncio":
        return None
    import uvloop  # optional: checked by the setting's validator

    return uvloop.new_event_loop
