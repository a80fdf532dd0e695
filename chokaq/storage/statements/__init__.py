"""The statements storage runs, built with SQLAlchemy Core and cached per shape; no execution here.

The builders return SQLAlchemy statements (or SQL Server's shapes, from
:mod:`..dialects.sqlserver_shapes`); :mod:`chokaq.storage.store` runs them and
:mod:`chokaq.storage.queries` prints them for review.
Modules: :mod:`.status` (Status literals), :mod:`.fence` (a worker's ownership predicate),
:mod:`.claim`, :mod:`.leases` (start, heartbeat, release, retry, reschedule), :mod:`.moves`
(JobsHot -> Archive/DLQ), :mod:`.counters` (StatsSummary), :mod:`.sweep`, :mod:`.retention`,
:mod:`.cancel` (what a worker reads and notes of a run an operator cancelled).
"""

from chokaq.storage.statements.cancel import cancelled_runs_statement, stopped_note_statement
from chokaq.storage.statements.claim import claim_statement, mssql_claim_statement, started_values
from chokaq.storage.statements.columns import Columns
from chokaq.storage.statements.counters import (
    FAILED,
    RETRIED,
    SUCCEEDED,
    StatsCounter,
    bump_statement,
    counter_insert_statement,
)
from chokaq.storage.statements.fence import fence, fence_params
from chokaq.storage.statements.leases import (
    heartbeat_statement,
    release_statement,
    reschedule_statement,
    retry_statement,
    start_statement,
)
from chokaq.storage.statements.moves import (
    MoveStatements,
    SourceValues,
    complete_statements,
    fail_statements,
    move_statements,
    zombie_statements,
)
from chokaq.storage.statements.retention import purge_older_statement
from chokaq.storage.statements.status import FETCHED, PENDING, PROCESSING, status_in, status_is
from chokaq.storage.statements.sweep import SweepStatements, sweep_statements

__all__ = [
    "FAILED",
    "FETCHED",
    "PENDING",
    "PROCESSING",
    "RETRIED",
    "SUCCEEDED",
    "Columns",
    "MoveStatements",
    "SourceValues",
    "StatsCounter",
    "SweepStatements",
    "bump_statement",
    "cancelled_runs_statement",
    "claim_statement",
    "complete_statements",
    "counter_insert_statement",
    "fail_statements",
    "fence",
    "fence_params",
    "heartbeat_statement",
    "move_statements",
    "mssql_claim_statement",
    "purge_older_statement",
    "release_statement",
    "reschedule_statement",
    "retry_statement",
    "start_statement",
    "started_values",
    "status_in",
    "status_is",
    "stopped_note_statement",
    "sweep_statements",
    "zombie_statements",
]
