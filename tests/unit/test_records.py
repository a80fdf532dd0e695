"""Row -> JobRecord mapping: the positional fast path for whole JobsHot rows must agree with the
generic mapping, and must be the path a claim takes."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import Location
from chokaq.storage import Storage
from chokaq.storage.records import HOT_ROW, hot_record, to_record
from chokaq.storage.schema import hot_record_columns, jobs_hot


def test_hot_row_order_is_the_tables() -> None:
    # Every column but the job's logs and progress, which no claim reads.
    assert tuple(c.name for c in hot_record_columns) == HOT_ROW
    assert tuple(c.name for c in jobs_hot.c) == (*HOT_ROW, "Logs", "Progress")


def test_fast_path_matches_the_generic_mapping(tmp_path: Path) -> None:
    storage = Storage(f"sqlite:///{tmp_path / 'r.db'}")
    storage.upgrade()
    job_id, _ = storage.enqueue(
        EnqueueRequest(type="t", payload='{"a": 1}', tags="x,y", idempotency_key="k", priority=7, created_by="me")
    )
    storage.start("w", storage.fetch("w", 1))
    whole = storage.read(lambda c: c.execute(select(*hot_record_columns).where(jobs_hot.c.Id == job_id)).one())
    assert tuple(whole._fields) == HOT_ROW
    fast = hot_record(whole)
    assert fast == to_record(Location.HOT, whole)
    assert (fast.priority, fast.idempotency_key, fast.attempt_count, fast.worker_id) == (7, "k", 1, "w")
    # Any other shape (a subset, another order) goes the generic way and still maps by name.
    cols = [jobs_hot.c.Payload, jobs_hot.c.Id, jobs_hot.c.Queue, jobs_hot.c.Type, jobs_hot.c.Tags]
    cols += [jobs_hot.c.AttemptCount, jobs_hot.c.WorkerId, jobs_hot.c.CreatedBy, jobs_hot.c.LastModifiedBy]
    cols += [jobs_hot.c.CreatedAtUtc]
    partial = storage.read(lambda c: c.execute(select(*cols).where(jobs_hot.c.Id == job_id)).one())
    rec = hot_record(partial)
    assert (rec.id, rec.payload, rec.tags) == (job_id, '{"a": 1}', "x,y")
    storage.close()


def test_a_payload_is_gated_unless_it_is_the_very_text_the_gate_just_passed() -> None:
    import pytest
    from pydantic import ValidationError

    from chokaq.domain.models import PAYLOAD_CHECKED, EnqueueRequest

    bad = '{"x": NaN}'
    with pytest.raises(ValidationError, match="not valid JSON"):
        # Another string: checked, whatever the context says.
        EnqueueRequest.model_validate({"type": "t", "payload": bad}, context={PAYLOAD_CHECKED: '{"x": 1}'})
    with pytest.raises(ValidationError, match="not valid JSON"):
        EnqueueRequest(type="t", payload=bad)
    good = '{"x":1}'
    req = EnqueueRequest.model_validate({"type": "t", "payload": good}, context={PAYLOAD_CHECKED: good})
    assert req.payload == good
