"""The storage contract's SQL Server arm: every contract operation, captured at the driver.

tests/profiles.py lists the profiles the contract runs on. SQLite and PostgreSQL run it live; SQL
Server runs it live only with CHOKAQ_TEST_MSSQL_URL. Here, without a server, each operation a
contract case calls (and each optional argument it passes) maps to the driver tests that send it
through production's mssql+pyodbc engine and check what reaches pyodbc: statement text, parameter
types (setinputsizes) and round trips. The tests below fail when a contract case calls something
that has no capture, or when a capture's test no longer makes the call it is listed for.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

from chokaq.storage import Storage
from tests.driver.contract_calls import KEYED, LIMITED, ROOT, Module, Use, uses_of
from tests.profiles import CONTRACT_MODULES, PROFILES

STATEMENTS = "tests/driver/test_statements.py::"
EXECUTOR = "tests/driver/test_executor.py::"
BINDS = "tests/driver/test_typed_binds.py::"
CAPTURES_HERE = "tests/driver/test_contract_captures.py::"
BULK = "tests/driver/test_bulk_enqueue.py::"

# Paths an operation takes that no argument shows (the contract reaches them through fenced-out
# or paused cases): their capture makes the operation's call and checks the path's statements.
COMPLETE_NOT_MOVED = "archived_already"
FAIL_NOT_MOVED = "recognised in the DLQ"
START_NOTHING = "nothing started: released"
PATHS = {COMPLETE_NOT_MOVED, FAIL_NOT_MOVED, START_NOTHING}

# Contract operation -> the driver tests that capture it on SQL Server.
CAPTURES: dict[Use, tuple[str, ...]] = {
    Use("enqueue"): (STATEMENTS + "test_an_enqueue_to_a_known_queue_is_one_round_trip",),
    Use("enqueue", KEYED): (CAPTURES_HERE + "test_an_enqueue_with_a_key_looks_it_up_then_inserts_under_a_savepoint",),
    Use("enqueue", "conn"): (
        CAPTURES_HERE + "test_an_enqueue_on_the_callers_connection_leaves_the_transaction_to_the_caller",
    ),
    Use("enqueue_many"): (
        STATEMENTS + "test_a_large_chinese_payload_is_bound_as_nvarchar_max",
        CAPTURES_HERE + "test_enqueue_many_is_one_transaction_per_batch_and_keyed_jobs_go_one_by_one",
    ),
    Use("enqueue_all"): (BULK + "test_a_bulk_enqueue_is_one_transaction_of_bounded_typed_inserts",),
    Use("enqueue_all", KEYED): (BULK + "test_a_bulk_enqueue_is_one_transaction_of_bounded_typed_inserts",),
    Use("enqueue_all", "conn"): (BULK + "test_a_bulk_enqueue_on_the_callers_connection_leaves_the_transaction_to_it",),
    Use("fetch"): (STATEMENTS + "test_claim_start_heartbeat_complete_are_one_round_trip_each",),
    Use("fetch", "queue_names"): (
        STATEMENTS + "test_a_multi_queue_claim_walks_the_fetch_index_once_per_queue",
        CAPTURES_HERE + "test_a_claim_by_queue_that_starts_binds_skip_and_zombie_types_as_json",
    ),
    Use("fetch", "start"): (STATEMENTS + "test_the_all_queue_claim_is_an_updatable_cte_over_one_locked_read",),
    Use("fetch", "zombie_retry_types"): (
        STATEMENTS + "test_the_all_queue_claim_is_an_updatable_cte_over_one_locked_read",
    ),
    Use("fetch", "skip"): (CAPTURES_HERE + "test_a_claim_by_queue_that_starts_binds_skip_and_zombie_types_as_json",),
    Use("fetch", LIMITED): (
        CAPTURES_HERE + "test_a_claim_of_a_max_workers_queue_locks_its_row_and_claims_only_the_room",
    ),
    Use("start"): (STATEMENTS + "test_claim_start_heartbeat_complete_are_one_round_trip_each",),
    Use("start", "zombie_retry_types"): (
        CAPTURES_HERE + "test_a_start_with_zombie_retry_types_marks_them_in_its_one_statement",
    ),
    Use("start", START_NOTHING): (CAPTURES_HERE + "test_a_start_that_starts_nothing_looks_for_its_own_then_releases",),
    Use("release"): (CAPTURES_HERE + "test_a_release_is_one_fenced_statement",),
    Use("heartbeat"): (
        STATEMENTS + "test_claim_start_heartbeat_complete_are_one_round_trip_each",
        STATEMENTS + "test_fenced_moves_join_one_lease_rowset",
    ),
    Use("complete"): (STATEMENTS + "test_claim_start_heartbeat_complete_are_one_round_trip_each",),
    Use("complete", COMPLETE_NOT_MOVED): (
        CAPTURES_HERE + "test_a_completion_it_did_not_move_is_looked_up_in_the_archive",
    ),
    Use("fail"): (EXECUTOR + "test_each_hot_operation_is_one_statement_on_an_autocommit_connection",),
    Use("fail", FAIL_NOT_MOVED): (CAPTURES_HERE + "test_a_failure_it_did_not_move_is_looked_up_in_the_dlq_by_reason",),
    Use("retry"): (CAPTURES_HERE + "test_a_retry_moves_the_row_then_counts_it_in_one_transaction",),
    Use("reschedule"): (CAPTURES_HERE + "test_a_reschedule_gives_the_attempt_back_in_one_statement",),
    Use("owned"): (CAPTURES_HERE + "test_owned_reads_the_workers_fetched_and_processing_jobs",),
    Use("sweep"): (
        STATEMENTS + "test_the_sweep_moves_rows_first_counters_last_in_bounded_batches",
        CAPTURES_HERE + "test_the_sweeps_zombie_statements_take_each_queues_own_timeout",
    ),
    Use("get_job"): (CAPTURES_HERE + "test_get_job_reads_the_three_tables_in_one_statement",),
    Use("list_queues"): (CAPTURES_HERE + "test_queues_are_listed_changed_and_counted_in_one_transaction_each",),
    Use("queue_stats"): (CAPTURES_HERE + "test_queues_are_listed_changed_and_counted_in_one_transaction_each",),
    **{
        Use("update_queue", argument): (
            CAPTURES_HERE + "test_queues_are_listed_changed_and_counted_in_one_transaction_each",
        )
        for argument in ("", "paused", "max_workers", "zombie_timeout_seconds")
    },
    Use("upgrade"): (CAPTURES_HERE + "test_an_upgrade_of_a_current_schema_takes_the_lock_and_changes_nothing",),
    Use("AdminStore.resurrect"): (CAPTURES_HERE + "test_a_resurrect_moves_the_row_then_gives_back_the_failure_count",),
}
# What the worker calls beside the contract's cases (after a claim whose reply was lost), captured the same way.
BESIDE_THE_CONTRACT = {Use("owned")}

_modules: dict[str, Any] = {}


def contract_uses() -> dict[Use, list[str]]:
    """Each operation the per-profile contract cases call, with the cases that call it."""
    found: dict[Use, list[str]] = {}
    for path in CONTRACT_MODULES:
        module = Module(path)
        for case in module.cases_taking(["storage", "db_url"]):
            for use in module.uses(case):
                found.setdefault(use, []).append(f"{path}::{case}")
    return found


def test_the_mssql_profile_is_captured_here_and_runs_live_only_with_a_server() -> None:
    (mssql,) = [p for p in PROFILES if p.name == "mssql"]
    assert mssql.captured_in == __name__.replace(".", "/") + ".py"
    assert [p.name for p in PROFILES if p.captured_in is None] == ["sqlite", "postgres"]


def test_every_contract_operation_has_a_sql_server_capture() -> None:
    uses = contract_uses()
    # The reading is alive: the contract's main operations are seen, with their arguments.
    assert {Use("fetch", "start"), Use("enqueue", KEYED), Use("fetch", LIMITED), Use("AdminStore.resurrect")} <= set(
        uses
    )
    missing = {str(u): cases[:3] for u, cases in uses.items() if u not in CAPTURES}
    assert not missing, f"contract operations with no SQL Server capture: {missing}"


def test_every_capture_is_of_a_contract_operation() -> None:
    """No stale rows: each is an operation the contract calls, or a path of one, or named beside it."""
    uses = set(contract_uses())
    for use in set(CAPTURES) - BESIDE_THE_CONTRACT:
        assert (Use(use.operation) if use.argument in PATHS else use) in uses, use


@pytest.mark.parametrize("use", sorted(CAPTURES), ids=str)
def test_each_capture_makes_the_call_it_is_listed_for(use: Use) -> None:
    for reference in CAPTURES[use]:
        assert (ROOT / reference.split("::")[0]).exists(), reference
        made = uses_of(reference, _modules)
        # A path the arguments do not show is checked by the test's own assertions; its call is checked here.
        wanted = Use(use.operation) if use.argument in PATHS else use
        assert wanted in made, f"{reference} does not call {wanted}; it calls {sorted(map(str, made))}"


def test_the_live_sql_server_run_includes_the_contract() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    match = re.search(r"^MSSQL_TESTS \?=((?:.*\\\n)*.*)$", makefile, re.M)
    assert match is not None
    listed = match.group(1).replace("\\\n", " ").split()
    assert set(CONTRACT_MODULES) <= set(listed), listed
    assert all((ROOT / p).exists() for p in listed), listed


def test_the_storage_names_read_are_storage_methods() -> None:
    """The reading knows Storage's methods by their signatures: the ones in the table still exist."""
    for use in CAPTURES:
        if "." not in use.operation:
            method = getattr(Storage, use.operation)
            params = inspect.signature(method).parameters
            assert use.argument in ("", KEYED, LIMITED, *PATHS) or use.argument in params, use
