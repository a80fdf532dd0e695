"""Calls on database threads: transaction functions on the engine's connections, and the hot path's
single statements straight through the driver (executor.py), each replayed whole on transient
errors by the replay loop (replay.py) with the thread's lost-reply bookkeeping (thread_replays.py).
The worker's event loop has its own transport for the same loop (loop_transport.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine

from chokaq.settings import StorageSettings
from chokaq.storage.dialects import profile_of
from chokaq.storage.executor import Executor
from chokaq.storage.executor_sql import Rows
from chokaq.storage.pooled_statement import run_pooled
from chokaq.storage.replay import Ambiguity, ReplayPolicy, may_have_committed
from chokaq.storage.thread_replays import ThreadReplays

# Ambiguity and may_have_committed live in replay.py; importable from here too.
__all__ = ["Ambiguity", "Transactions", "may_have_committed"]
T = TypeVar("T")


class Transactions:
    """Runs calls against ``engine``. Thread-safe: every call takes its own connection (from the
    pool, or the thread's own for the hot path), and the replay bookkeeping is per thread."""

    def __init__(self, engine: Engine, settings: StorageSettings) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.profile = profile_of(engine.dialect)
        self.settings = settings
        # SQL Server's pool for single statements (see autocommit_pool.py); None elsewhere.
        self.autocommit = self.profile.autocommit_twin(engine)
        # The hot path's own driver connections (see executor.py); SQL Server's come from the
        # autocommit twin, already in autocommit.
        translate = engine.get_execution_options().get("schema_translate_map")
        self.executor = Executor(self.autocommit or engine, translate)
        # The replay policy, shared with the worker's loop transport (loop_transport.py).
        self.replays = ReplayPolicy(settings, self.dialect)
        self._threads = ThreadReplays(self.replays)

    @property
    def fault_injector(self) -> Callable[[str], None] | None:
        """Test hook: called with the operation name before each attempt, on either transport."""
        return self.replays.fault_injector

    @fault_injector.setter
    def fault_injector(self, hook: Callable[[str], None] | None) -> None:
        self.replays.fault_injector = hook

    def close(self) -> None:
        self.executor.close()
        if self.autocommit is not None:
            self.autocommit.dispose()
        self.engine.dispose()

    # ----------------------------------------------------------------- transaction functions
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
            if single and self.profile.autocommit_statements:
                return fn(raw.execution_options(isolation_level="AUTOCOMMIT"))
            conn = raw.execution_options(chokaq_readonly=True) if readonly else raw
            with conn.begin():
                return fn(conn)

    # ----------------------------------------------------------------- statements on the driver
    def run_statement(self, stmt: Any, params: dict[str, Any], *, op: str, prepare: bool = True) -> Rows:
        """One hot-path writing statement straight through the driver on this thread's own
        connection (see executor.py), replayed on transient errors and watched for lost replies
        exactly as :meth:`write_one` does. ``prepare``: see :meth:`Executor.run`."""

        def sending() -> None:
            self.sending(writes=True)  # from here on a failure may come after the server ran it

        return self.retrying(lambda: self.executor.run(stmt, params, sending=sending, prepare=prepare), op=op)

    @property
    def pools_driver_statements(self) -> bool:
        """Whether :meth:`pooled_once` may run a statement alone (not where every write takes its
        own transaction: SQLite's BEGIN IMMEDIATE)."""
        return self.profile.autocommit_statements

    def pooled_once(self, stmt: Any, params: dict[str, Any]) -> Rows:
        """Inside :meth:`retrying`: one writing statement in autocommit, straight through the
        driver on a connection of the pool (see pooled_statement.py), watched for lost replies as
        :meth:`attempt` is."""
        return run_pooled(
            self.executor, self.autocommit or self.engine, stmt, params, sending=lambda: self.sending(writes=True)
        )

    # ----------------------------------------------------------------- replays (thread_replays.py)
    def retrying(self, once: Callable[[], T], *, op: str) -> T:
        """Call ``once`` until it succeeds, a non-transient error, or ``transient_retries`` replays."""
        return self._threads.retrying(once, op=op)

    def sending(self, *, writes: bool) -> None:
        """Inside an attempt: a statement is about to reach the server. :meth:`attempt` calls it;
        so must any other runner of statements inside :meth:`retrying` (a raw driver path), or a
        lost reply would be taken for a clean failure."""
        self._threads.sending(writes=writes)

    def replaying(self) -> bool:
        """Inside a transaction function: an earlier attempt of this same call failed in a way that
        may have committed (see retrying). Only enqueues ask: they must not store twice."""
        return self._threads.replaying()

    def ambiguity(self) -> contextlib.AbstractContextManager[Ambiguity]:
        """Whether a write in the block, on this thread, may have committed behind a lost reply
        (see :meth:`ThreadReplays.ambiguity`)."""
        return self._threads.ambiguity()
