"""The transaction runner: one connection per call, replayed whole on transient errors, with the
bookkeeping that tells a caller when a write may have committed behind a lost reply."""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import DBAPIError, OperationalError

from chokaq.settings import StorageSettings
from chokaq.storage.dialects import profile_of
from chokaq.storage.engine import is_transient
from chokaq.storage.executor import Executor

log = logging.getLogger("chokaq.storage")
T = TypeVar("T")


@dataclass
class Ambiguity:
    ambiguous: bool = False


def may_have_committed(exc: BaseException) -> bool:
    """A failure that may have come after the server committed: the connection broke or timed out.
    Deadlocks, serialisation failures and other answers from the server rolled back for sure."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate:
        return sqlstate.startswith("08")  # connection exceptions
    return True


def autocommit_twin(engine: Engine) -> Engine | None:
    """SQL Server: a second pool, over the same connection set-up, whose connections stay in
    autocommit for their whole life, for the single-statement hot path.

    Switching a pooled connection to AUTOCOMMIT for one statement costs a
    ``SET TRANSACTION ISOLATION LEVEL`` round trip when SQLAlchemy resets it on its way back to
    the pool. PostgreSQL switches client-side and keeps the shared pool.
    """
    if engine.dialect.name != "mssql":
        return None
    pool = engine.pool.recreate()  # same creator and connect-time set-up, its own connections

    @event.listens_for(pool, "connect")
    def _autocommit(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.autocommit = True

    return Engine(pool, engine.dialect, engine.url, echo=engine.echo)


class Transactions:
    """Runs transaction functions against ``engine``. Thread-safe: every call takes its own
    connection from the pool, and the replay bookkeeping is per thread."""

    def __init__(self, engine: Engine, settings: StorageSettings) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.profile = profile_of(engine.dialect)
        self.settings = settings
        # SQL Server's pool for single statements (see autocommit_twin); None elsewhere.
        self.autocommit = autocommit_twin(engine)
        # The hot path's own driver connections (see executor.py); SQL Server's come from the
        # autocommit twin, already in autocommit.
        translate = engine.get_execution_options().get("schema_translate_map")
        self.executor = Executor(self.autocommit or engine, translate)
        # Test hook: called with the operation name before each transaction attempt.
        self.fault_injector: Callable[[str], None] | None = None
        self._local = threading.local()  # per-call ambiguity, see retrying

    def close(self) -> None:
        self.executor.close()
        if self.autocommit is not None:
            self.autocommit.dispose()
        self.engine.dispose()

    def write(self, fn: Callable[[Connection], T], *, op: str = "write") -> T:
        """Run ``fn`` in one write transaction, replaying it whole on transient errors."""
        return self.run(fn, op=op, readonly=False)

    def read(self, fn: Callable[[Connection], T], *, op: str = "read") -> T:
        return self.run(fn, op=op, readonly=True)

    def write_one(self, fn: Callable[[Connection], T], *, op: str) -> T:
        """Run ``fn``, which issues exactly one writing statement, without an explicit transaction.

        The statement is atomic by itself; leaving out BEGIN and COMMIT saves two of its three round
        trips on the worker's hot path (claim, start, heartbeat). SQLite keeps its BEGIN IMMEDIATE.
        """
        return self.run(fn, op=op, readonly=False, single=True)

    def driver(self, stmt: Any, params: dict[str, Any], *, op: str, prepare: bool = True) -> list[tuple[Any, ...]]:
        """One hot-path writing statement straight through the driver (see executor.py), replayed
        on transient errors and watched for lost replies exactly as :meth:`write_one` does.
        ``prepare``: see :meth:`Executor.run`."""

        def sending() -> None:
            self._local.sent = True  # from here on a failure may come after the server ran it

        return self.retrying(lambda: self.executor.run(stmt, params, sending=sending, prepare=prepare), op=op)

    def run(self, fn: Callable[[Connection], T], *, op: str, readonly: bool, single: bool = False) -> T:
        """``fn`` in a transaction (``single``: one statement outside one), replayed on transient
        errors; ``readonly`` on SQLite skips the write lock (see engine.py)."""
        return self.retrying(lambda: self.attempt(fn, readonly=readonly, single=single), op=op)

    def attempt(self, fn: Callable[[Connection], T], *, readonly: bool, single: bool = False) -> T:
        """One attempt of :meth:`run`, for a caller inside :meth:`retrying`."""
        if single and self.autocommit is not None:
            with self.autocommit.connect() as conn:
                # From here on a failure may come after the server ran the statement.
                self.sending(writes=not readonly)
                return fn(conn)
        with self.engine.connect() as raw:
            self.sending(writes=not readonly)
            if single and self.dialect != "sqlite":
                return fn(raw.execution_options(isolation_level="AUTOCOMMIT"))
            conn = raw.execution_options(chokaq_readonly=True) if readonly else raw
            with conn.begin():
                return fn(conn)

    @property
    def pools_driver_statements(self) -> bool:
        """Whether :meth:`pooled_once` may run a statement alone (not SQLite: its writes take
        BEGIN IMMEDIATE)."""
        return self.dialect != "sqlite"

    def pooled_once(self, stmt: Any, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Inside :meth:`retrying`: one writing statement in autocommit, straight through the
        driver on a connection of the pool (see :meth:`Executor.run_pooled`), watched for lost
        replies as :meth:`attempt` is."""
        return self.executor.run_pooled(
            self.autocommit or self.engine, stmt, params, sending=lambda: self.sending(writes=True)
        )

    def sending(self, *, writes: bool) -> None:
        """Inside an attempt: a statement is about to reach the server. From here on a failed
        write may have run there (see :meth:`retrying`). :meth:`run` calls it; so must any other
        runner of statements inside :meth:`retrying` (a raw driver path), or a lost reply would be
        taken for a clean failure."""
        self._local.sent = writes

    def retrying(self, once: Callable[[], T], *, op: str) -> T:
        """Call ``once`` until it succeeds, a non-transient error, or ``transient_retries`` replays."""
        attempts = self.settings.transient_retries
        self._local.replaying = False
        for attempt in range(attempts + 1):
            self._local.sent = False
            try:
                if self.fault_injector is not None:
                    self.fault_injector(op)
                return once()
            except (DBAPIError, OperationalError) as exc:
                if self._local.sent and self.unheard(exc):
                    # The connection died under a write: it may have committed, and the reply was
                    # lost. The replay cannot tell; callers that care reconcile (see ambiguity()).
                    self._local.ambiguous = True
                    self._local.replaying = True  # the attempts after this one: see replaying()
                time.sleep(self.replay_delay(exc, attempt, op=op))
        raise AssertionError("unreachable")

    def unheard(self, exc: BaseException) -> bool:
        """A failure of a statement already sent that may have committed behind a lost reply
        (never on SQLite: no connection to lose)."""
        return self.dialect != "sqlite" and may_have_committed(exc)

    def replay_delay(self, exc: BaseException, attempt: int, *, op: str) -> float:
        """How long to wait before replaying a call whose ``attempt`` (from 0) failed with ``exc``;
        raises ``exc`` when it is not to be replayed (not transient, or the replays are used up).
        The policy of :meth:`retrying`, shared with the worker's calls on its event loop
        (loop_driver.py)."""
        if attempt >= self.settings.transient_retries or not is_transient(exc):
            raise exc
        delay: float = min(0.05 * 2.0**attempt, 2.0) * (0.5 + random.random())
        log.warning(
            "transient database error in %s (attempt %d), retrying in %.2fs: %s",
            op,
            attempt + 1,
            delay,
            str(exc).splitlines()[0],
        )
        return delay

    @contextlib.contextmanager
    def ambiguity(self) -> Iterator[Ambiguity]:
        """Tells whether a write in the block, on this thread, failed in a way that may have
        committed (a lost reply): the block's outcome may then include changes it never saw.
        Blocks nest: an enclosing block also learns what happened in an inner one."""
        outer = bool(getattr(self._local, "ambiguous", False))
        self._local.ambiguous = False
        seen = Ambiguity()
        try:
            yield seen
        finally:
            seen.ambiguous = bool(getattr(self._local, "ambiguous", False))
            self._local.ambiguous = outer or seen.ambiguous

    def replaying(self) -> bool:
        """Inside a transaction function: an earlier attempt of this same call failed in a way that
        may have committed (see retrying). Only enqueues ask: they must not store twice."""
        return bool(getattr(self._local, "replaying", False))
