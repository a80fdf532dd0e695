"""The recovery sweep: Fetched jobs whose worker went quiet back to Pending, and Processing jobs
whose heartbeat expired to Pending (ZombieRetry types) or to the DLQ as Zombie."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from sqlalchemy import Connection

from chokaq.domain.models import SweepResult
from chokaq.storage import statements as st
from chokaq.storage.incidents import audit_zombie_retries
from chokaq.storage.moving import bump_stats, run_move
from chokaq.storage.transactions import Transactions


def sweep(tx: Transactions, fetched_timeout: float, zombie_timeout: float, max_attempts: int, size: int) -> SweepResult:
    """Both recovery phases. Safe to run from any number of processes at once.

    Each phase runs in transactions of at most ``size`` jobs (``Storage.CleanupBatchSize``) until
    nothing is left, so a backlog of zombies never becomes one long transaction. Every transaction
    changes its job rows first and the StatsSummary counters last, as completions do: two
    transactions never wait for each other's rows in opposite orders.
    """
    # At most as many rows per statement as this database takes without escalating its locks.
    size = tx.profile.statement_rows(size)
    stmts = st.sweep_statements(fetched_timeout, zombie_timeout, max_attempts, size)

    def recover(c: Connection) -> int:
        return int(c.execute(stmts.recover).rowcount or 0)

    def bury(c: Connection) -> list[str]:
        ids = [r[0] for r in c.execute(stmts.zombie_ids).all()]
        if not ids:
            return []
        return [job_id for job_id, _ in run_move(c, stmts.zombies, {"zombie_ids": ids})]

    def loop(phase: Callable[[Connection], int], op: str) -> int:
        total = 0
        while True:
            n = tx.write(phase, op=op)
            total += n
            if n < size:
                return total

    recovered = loop(recover, "sweep_recover")
    retried = _retry(tx, stmts, size)
    zombie_ids: list[str] = []
    while True:
        batch = tx.write(bury, op="sweep_zombies")
        zombie_ids += batch
        if len(batch) < size:
            break
    return SweepResult(recovered=recovered, archived=len(zombie_ids), retried_zombies=retried, zombie_ids=zombie_ids)


def _retry(tx: Transactions, stmts: st.SweepStatements, size: int) -> int:
    """The expired jobs of ZombieRetry types back to Pending, a batch per transaction, each batch
    audited with the workers that held its jobs (their crash incidents count them)."""

    def batch(c: Connection) -> tuple[int, int]:
        """(jobs chosen, jobs retried): one whose heartbeat came in between is left where it is."""
        chosen = {r[0]: dict(r._mapping) for r in c.execute(stmts.retry_ids).all()}
        if not chosen:
            return 0, 0
        retried = c.execute(stmts.retry, {"retry_ids": list(chosen)}).all()
        if retried:
            audit_zombie_retries(c, [chosen[r[0]] for r in retried])
            bump_stats(c, st.RETRIED, Counter(r[1] for r in retried))
        return len(chosen), len(retried)

    total = 0
    while True:
        chosen, retried = tx.write(batch, op="sweep_retry")
        total += retried
        if chosen < size:
            return total
