"""What the engine last connected with, for a :class:`~chokaq.storage.loop_transport.LoopTransport`
that must connect exactly as the engine does, and why it may not (a hook of someone else's)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Engine, event


class ConnectArgs:
    """What the engine last connected with: the driver's arguments as SQLAlchemy hands them over
    (its URL and ``connect_args``, through the ``do_connect`` event), so a :class:`LoopTransport`
    connects exactly as the engine does. Kept in memory only: it holds the password.

    Only for an engine chokaq built (``own``) whose connections are set up by their arguments
    alone. The threads' connections also run the engine's pool hooks (``connect``, ``checkout``:
    a ``SET ROLE``, say, or an instrumentation's) and ``do_connect`` hooks (a token sign-in),
    which a raw asynchronous connect would leave out; with any such hook of someone else's,
    claims and completions stay on the threads (:meth:`refusal` says why)."""

    def __init__(self, engine: Engine, *, own: bool) -> None:
        self._engine = engine
        self._own = own
        # The arguments of the engine's last connect (None before its first): use them only
        # where refusal() has nothing to say.
        self.seen: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        event.listen(engine, "do_connect", self._seen)

    def refusal(self) -> str | None:
        """Why a loop transport must not connect as this engine does (None: it may)."""
        if not self._own:
            return "the engine was built by the application"
        pool = self._engine.pool.dispatch
        for kind, hooks in (("pool connect", pool.connect), ("pool checkout", pool.checkout)):
            foreign = [fn for fn in hooks if not _sqlalchemys(fn)]
            if foreign:
                return f"the engine has a {kind} hook ({_name(foreign[0])})"
        for fn in self._engine.dialect.dispatch.do_connect:
            if not isinstance(getattr(fn, "__self__", None), ConnectArgs):  # another Storage's is fine
                return f"the engine has a do_connect hook ({_name(fn)})"
        return None

    def _seen(self, _dialect: Any, _record: Any, cargs: Sequence[Any], cparams: Mapping[str, Any]) -> None:
        self.seen = (tuple(cargs), dict(cparams))  # returns None: the engine connects as usual


def _sqlalchemys(fn: Any) -> bool:
    """A hook SQLAlchemy itself registers (its dialect's on-connect set-up)."""
    return str(getattr(fn, "__module__", "")).startswith("sqlalchemy.")


def _name(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
