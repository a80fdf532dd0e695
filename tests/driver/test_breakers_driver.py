"""SQL Server at the driver for the circuit breakers (docs/circuit-breaker.md): statement text,
parameter types, locks and round trips of every new statement, and the claim unchanged while the
breakers are off (see recording.py)."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

from chokaq.domain.breakers import CLOSED, HALF_OPEN, OPEN, BreakerPolicy
from chokaq.storage import BreakerStore, Storage
from chokaq.storage.admin import Actor
from chokaq.storage.schema import circuit_breakers
from tests.driver.recording import Call, Recorder
from tests.driver.rows import HOT, T0, columns, row

POLICY = BreakerPolicy(failure_threshold=2, window=60, open_duration=30, half_open_probes=2)
ROW_COLUMNS = [*columns(circuit_breakers), "Now"]


def breaker_row(state: int = CLOSED, **values: Any) -> tuple[Any, ...]:
    merged = {
        "JobType": "mailer",
        "State": state,
        "FailureCount": 0,
        "ProbesInFlight": 0,
        "LastUpdatedUtc": T0,
        "Now": T0 + timedelta(seconds=1),
        **values,
    }
    return tuple(merged.get(c) for c in ROW_COLUMNS)


def executes(recorder: Recorder) -> list[Call]:
    return [c for c in recorder.round_trips() if c.kind == "execute"]


def commits(recorder: Recorder) -> int:
    return len([c for c in recorder.round_trips() if c.kind == "commit"])


LOCKED = re.compile(
    r"^SELECT chokaq\.\[CircuitBreakers\]\.\[JobType\], .*SYSUTCDATETIME\(\) AS \[Now\]\s+"
    r"FROM chokaq\.\[CircuitBreakers\] WITH \(UPDLOCK, ROWLOCK\)\s+"
    r"WHERE chokaq\.\[CircuitBreakers\]\.\[JobType\] = \?$",
    re.S,
)


def test_a_first_failure_makes_the_row_under_a_savepoint_then_counts_it(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"FROM chokaq\.\[CircuitBreakers\]", [], ROW_COLUMNS)  # no row yet
    recorder.answer(r"FROM chokaq\.\[CircuitBreakers\]", [breaker_row()], ROW_COLUMNS)
    assert BreakerStore(mssql).record_failure("mailer", POLICY, "w1") is None
    trips = executes(recorder)
    sqls = [c.sql for c in trips]
    assert LOCKED.match(sqls[0]), sqls[0]
    assert sqls[1:3] == ["IF @@TRANCOUNT = 0 BEGIN TRANSACTION", "SAVE TRANSACTION sa_savepoint_1"]
    assert sqls[3] == (
        "INSERT INTO chokaq.[CircuitBreakers] ([JobType], [State], [FailureCount], [ProbesInFlight], "
        "[LastUpdatedUtc]) VALUES (?, 0, 0, 0, SYSUTCDATETIME())"
    )
    assert LOCKED.match(sqls[4])
    update = trips[-1]
    assert update.sql.startswith("UPDATE chokaq.[CircuitBreakers] SET [State]=?, [FailureCount]=?")
    assert update.sql.endswith("WHERE chokaq.[CircuitBreakers].[JobType] = ?")
    # The columns still NULL are NULL in the text, not NULL parameters.
    assert "[OpenedAtUtc]=NULL, [OpenUntilUtc]=NULL" in update.sql and "[UpdatedBy]=NULL" in update.sql
    (values,) = update.params
    now = T0 + timedelta(seconds=1)
    assert values == (CLOSED, 1, now, 0, now, "mailer")
    # Every parameter typed (the NULL times too): no describe round trip.
    assert all(c.describes == 0 for c in trips)
    assert commits(recorder) == 1


def test_the_threshold_opens_it_in_one_locked_read_and_one_write(mssql: Storage, recorder: Recorder) -> None:
    counted = breaker_row(FailureCount=1, WindowStartUtc=T0)
    recorder.answer(r"FROM chokaq\.\[CircuitBreakers\]", [counted], ROW_COLUMNS)
    change = BreakerStore(mssql).record_failure("mailer", POLICY, "w1")
    assert change is not None and (change.old, change.new) == ("closed", "open")
    trips = executes(recorder)
    assert len(trips) == 3 and LOCKED.match(trips[0].sql) and trips[1].sql.startswith("UPDATE")
    # The change, in the event feed of the same transaction: every process's Deck hears it.
    assert trips[2].sql.startswith("INSERT INTO chokaq.[EventFeed]") and trips[2].params[0][0] == "breaker.changed"
    (values,) = trips[1].params
    now = T0 + timedelta(seconds=1)
    assert values[:6] == (OPEN, 2, T0, now, now + timedelta(seconds=30), 0)
    assert values[6] == "w1"
    assert all(c.describes == 0 for c in trips) and commits(recorder) == 1


def test_probes_are_claimed_under_the_breaker_row_lock(mssql: Storage, recorder: Recorder) -> None:
    due = breaker_row(OPEN, OpenedAtUtc=T0, OpenUntilUtc=T0, FailureCount=2)
    recorder.answer(r"FROM chokaq\.\[CircuitBreakers\]", [due], ROW_COLUMNS)
    recorder.answer(r"^SELECT TOP 2 j\.\[Id\]", [("01A",), ("01B",)], ["Id"])
    claimed = [row(HOT, i, Type="mailer", WorkerId="w1", Status=1) for i in ("01A", "01B")]
    recorder.answer(r"^UPDATE chokaq\.\[JobsHot\]", claimed, columns(HOT))
    jobs, change = BreakerStore(mssql).claim_probes("w1", "mailer", POLICY, ["q1"])
    assert [j.id for j in jobs] == ["01A", "01B"]
    assert change is not None and (change.old, change.new) == ("open", "half_open")
    trips = executes(recorder)
    assert LOCKED.match(trips[0].sql)
    ids = trips[1]
    # The claim's own read: the claim index, one queue at a time, the type read from the index.
    assert "FROM chokaq.[JobsHot] WITH (INDEX([IX_JobsHot_Fetch]), UPDLOCK, READPAST, ROWLOCK)" in ids.sql
    assert "[Type] = ?" in ids.sql and "[IsPaused] = 1" in ids.sql and "OPENJSON" in ids.sql
    assert ids.params[0] == ('["q1"]', "mailer")
    claim = trips[2]
    assert claim.sql.startswith("UPDATE chokaq.[JobsHot] SET [Status]=1, [WorkerId]=?")
    # By primary key (Status + 0): the probes' claim-index keys are locked already.
    assert "OUTPUT inserted.[Id]" in claim.sql and "[Status] + 0 = 0" in claim.sql
    assert claim.params[0] == ("w1", '["01A", "01B"]')
    assert "[WindowStartUtc]=NULL" in trips[3].sql
    (values,) = trips[3].params
    assert values == (HALF_OPEN, 2, T0, T0, 2, "w1", T0 + timedelta(seconds=1), "mailer")  # two probes in flight
    assert all(c.describes == 0 for c in trips) and commits(recorder) == 1


def test_an_operator_close_is_audited_in_the_same_transaction(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"FROM chokaq\.\[CircuitBreakers\]", [breaker_row(OPEN, FailureCount=5)], ROW_COLUMNS)
    state, change = BreakerStore(mssql).close("mailer", Actor("ops:alice", "operator"))
    assert state.state == CLOSED and change is not None
    trips = executes(recorder)
    # The audit row and its event feed row (every process's Deck hears of it).
    assert [c.sql.split(" ")[0] for c in trips] == ["SELECT", "UPDATE", "INSERT", "INSERT"]
    audit = trips[2]
    assert trips[3].sql.startswith("INSERT INTO chokaq.[EventFeed]")
    assert audit.sql.startswith("INSERT INTO chokaq.[AuditLog]")
    assert "ops:alice" in audit.params[0] and "breaker.close" in audit.params[0]
    details = next(v for v in audit.params[0] if isinstance(v, str) and v.startswith("{"))
    assert json.loads(details) == {"job_type": "mailer", "was": "open", "failure_count": 5}
    assert all(c.describes == 0 for c in trips) and commits(recorder) == 1


def test_the_sweep_moves_expired_jobs_in_one_batch_per_transaction(mssql: Storage, recorder: Recorder) -> None:
    recorder.answer(r"^SELECT TOP 2 chokaq\.\[JobsHot\]\.\[Id\]", [("01A",), ("01B",)], ["Id"])
    recorder.answer(r"INSERT INTO chokaq\.\[JobsDLQ\]", [("01A", "default"), ("01B", "default")], ["Id", "Queue"])
    recorder.answer(r"^SELECT TOP 2 chokaq\.\[JobsHot\]\.\[Id\]", [], ["Id"])
    assert BreakerStore(mssql).expire_waiting(86400.0, 2) == ["01A", "01B"]
    trips = executes(recorder)
    ids = trips[0]
    assert "[Status] = 0" in ids.sql
    assert "[Type] IN (SELECT chokaq.[CircuitBreakers].[JobType]" in ids.sql and "[State] != 0" in ids.sql
    assert "DATEADD" in ids.sql and "[CreatedAtUtc] <" in ids.sql
    move = trips[1]
    # One T-SQL batch: the rows copied as CircuitBreakerOpen (3) with their details, deleted, counted.
    assert "INSERT INTO chokaq.[JobsDLQ]" in move.sql and "DELETE" in move.sql and "[FailedTotal]" in move.sql
    assert "waited longer than Retry.MaxJobAge" in move.sql and ", 3," in move.sql
    assert '["01A", "01B"]' in move.params[0]
    assert all(c.describes == 0 for c in trips)
    assert commits(recorder) == 2  # the full batch, then the empty look that ends it


def test_the_claim_leaves_out_open_types_only_when_the_breakers_are_on(mssql: Storage, recorder: Recorder) -> None:
    mssql.fetch("w1", 5)
    (off,) = [c for c in recorder.statements if c.sql.startswith("WITH pick AS")]
    assert "CircuitBreakers" not in off.sql
    recorder.clear()
    mssql._claimer.breaker = True
    mssql.fetch("w1", 5)
    (on,) = [c for c in recorder.statements if c.sql.startswith("WITH pick AS")]
    extra = (
        " AND (chokaq.[JobsHot].[Type] NOT IN (SELECT chokaq.[CircuitBreakers].[JobType] \n"
        "FROM chokaq.[CircuitBreakers] \nWHERE chokaq.[CircuitBreakers].[State] != 0))"
    )
    # The same statement but for the filter, with the same parameters, all typed.
    assert extra in on.sql and on.sql.replace(extra, "") == off.sql
    assert on.params == off.params and on.describes == 0
