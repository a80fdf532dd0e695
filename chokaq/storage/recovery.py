"""The recovery sweep: Fetched jobs whose worker went quiet back to Pending, and Processing jobs
whose heartbeat expired to Pending (ZombieRetry types) or to the DLQ as Zombie."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable

from sqlalchemy import Connection

from chokaq.domain.models import SweepResult
from chokaq.storage import event_feed
from chokaq.storage import statements as st
from chokaq.storage.incidents import audit_zombie_retries
from chokaq.storage.moving import bump_stats, run_move
from chokaq.storage.transactions import Transactions


def sweep(tx: Transactions, fetched_timeout: float, zombie_timeout: float, max_attempts: int, size: int) -> SweepResult:
    """Both recovery phases. Safe to run from any number of processes at once.

    Each phase runs in transactions of at most ``size`` jobs (``Storage.CleanupBatchSize``) until
    nothing is left, so a backlog of zombies never becomes one long transaction. Every transaction
    changes its job rows first and the StatsSummary counters last, as completions do: two
    transactions never wait for each other's rows in opposite orders. A transaction that moved
    jobs also writes what it moved to the audit log (as ``system:sweep``) and the event feed
    (``zombie.rescue``), so every process's Deck hears of it.
    """
    # At most as many rows per statement as this database takes without escalating its locks.
    size = tx.profile.statement_rows(size)
    stmts = st.sweep_statements(fetched_timeout, zombie_timeout, max_attempts, size)
    run = uuid.uuid4().hex[:12]  # the feed rows of one sweep share it: the Deck shows them as one line

    def recover(c: Connection) -> int:
        ids = [r[0] for r in c.execute(stmts.recover).all()]
        _rescued(c, run, "recovered", ids)
        return len(ids)

    def bury(c: Connection) -> list[str]:
        ids = [r[0] for r in c.execute(stmts.zombie_ids).all()]
        if not ids:
            return []
        buried = [job_id for job_id, _ in run_move(c, stmts.zombies, {"zombie_ids": ids})]
        _rescued(c, run, "archived", buried)
        return buried

    def loop(phase: Callable[[Connection], int], op: str) -> int:
        total = 0
        while True:
            n = tx.write(phase, op=op)
            total += n
            if n < size:
                return total

    recovered = loop(recover, "sweep_recover")
    retried = _retry(tx, stmts, size, run)
    zombie_ids: list[str] = []
    while True:
        batch = tx.write(bury, op="sweep_zombies")
        zombie_ids += batch
        if len(batch) < size:
            break
    return SweepResult(recovered=recovered, archived=len(zombie_ids), retried_zombies=retried, zombie_ids=zombie_ids)


def _retry(tx: Transactions, stmts: st.SweepStatements, size: int, run: str) -> int:
    """The expired jobs of ZombieRetry types back to Pending, a batch per transaction, each batch
    audited with the workers that held its jobs (their crash incidents count them) and told to the
    event feed."""

    def batch(c: Connection) -> tuple[int, int]:
        """(jobs chosen, jobs retried): one whose heartbeat came in between is left where it is."""
        chosen = {r[0]: dict(r._mapping) for r in c.execute(stmts.retry_ids).all()}
        if not chosen:
            return 0, 0
        retried = c.execute(stmts.retry, {"retry_ids": list(chosen)}).all()
        if retried:
            audit_zombie_retries(c, [chosen[r[0]] for r in retried])
            _told(c, run, "retried", [r[0] for r in retried])
            bump_stats(c, st.RETRIED, Counter(r[1] for r in retried))
        return len(chosen), len(retried)

    total = 0
    while True:
        chosen, retried = tx.write(batch, op="sweep_retry")
        total += retried
        if chosen < size:
            return total


def _rescued(c: Connection, run: str, what: str, ids: list[str]) -> None:
    """One sweep transaction's moves (``what``: recovered, retried or archived), in its audit row and
    its feed row. Nothing when it moved nothing: an idle sweep writes no row."""
    if not ids:
        return
    counts = {k: len(ids) if k == what else 0 for k in ("recovered", "archived", "retried")}
    event_feed.audit_row(c, event_feed.SYSTEM_SWEEP, "sweep.rescue", ids, {**counts, "moved": what, "sweep": run})
    _told(c, run, what, ids)


def _told(c: Connection, run: str, what: str, ids: list[str]) -> None:
    """The feed row of one sweep transaction's moves (the retries' audit row is the incidents' own)."""
    counts = {k: len(ids) if k == what else 0 for k in ("recovered", "archived", "retried")}
    data = {**counts, "ids": ids[: event_feed.MAX_EVENT_IDS], "moved": what, "sweep": run}
    event_feed.record(c, "zombie.rescue", data)
