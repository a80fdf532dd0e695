"""How runtime collaborators run a blocking storage call: on the worker's database threads, off
the event loop (``await db(storage.heartbeat, worker_id, leases)``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ParamSpec, Protocol, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class DbCall(Protocol):
    def __call__(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Awaitable[T]: ...
