"""A list page's total is exact up to the cap (Admin.ExactCountLimit) and past it a lower bound the
page says it is: the count reads at most cap + 1 matches, so a page costs the same at a million
dead jobs as at a thousand (docs/admin-figures.md)."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from chokaq.api import create_api
from chokaq.domain.states import Location
from chokaq.storage import Actor
from chokaq.storage.admin import AdminStore
from chokaq.storage.admin_types import JobFilter
from tests.api.helpers import HEADERS, enqueue, make_app, make_dead

OPS = Actor("ops@example.com", "operator")


def test_a_total_past_the_cap_is_a_lower_bound_and_exact_below_it(db_url: str) -> None:
    app = make_app(db_url)
    try:
        make_dead(app.storage, 8, queue="mail")
        make_dead(app.storage, 2, queue="sms")
        capped = AdminStore(app.storage, count_cap=5)
        first = capped.list_jobs(Location.DLQ, JobFilter(), page_size=3)
        assert (first.total, first.total_is_lower_bound, len(first.items)) == (5, True, 3)
        # Within the cap: exact, as before.
        sms = capped.list_jobs(Location.DLQ, JobFilter(queue="sms"), page_size=1)
        assert (sms.total, sms.total_is_lower_bound) == (2, False)
        # A full page past the cap: at least as many as it has shown.
        third = capped.list_jobs(Location.DLQ, JobFilter(), page=3, page_size=3)
        assert (third.total, third.total_is_lower_bound, len(third.items)) == (9, True, 3)
        # The last page, neither empty nor full, says where the matches end: exact at any cap.
        last = capped.list_jobs(Location.DLQ, JobFilter(), page=4, page_size=3)
        assert (last.total, last.total_is_lower_bound, len(last.items)) == (10, False, 1)
        # Past the end: empty, the total a lower bound at least the rows before it.
        beyond = capped.list_jobs(Location.DLQ, JobFilter(), page=5, page_size=3)
        assert (beyond.items, beyond.total, beyond.total_is_lower_bound) == ([], 5, True)
        # Asked for in full, or uncapped, it counts every match.
        assert capped.list_jobs(Location.DLQ, JobFilter(), page_size=3, exact_total=True).total == 10
        assert AdminStore(app.storage, count_cap=None).list_jobs(Location.DLQ, JobFilter(), page_size=3).total == 10
        hot = [enqueue(app.storage, queue="later") for _ in range(7)]
        pending = capped.list_jobs(Location.HOT, JobFilter(queue="later"), page_size=2)
        assert (pending.total, pending.total_is_lower_bound) == (5, True) and len(hot) == 7
        assert capped.list_jobs(Location.ARCHIVE, JobFilter(), page_size=2).total == 0
    finally:
        app.close()


def test_the_api_and_the_audit_say_when_the_total_is_a_lower_bound(db_url: str) -> None:
    app = make_app(db_url, admin={"exact_count_limit": 4})
    try:
        dead = make_dead(app.storage, 6)
        admin = AdminStore(app.storage)
        for job_id in dead:
            admin.purge_dlq(OPS, ids=[job_id])
        make_dead(app.storage, 6)
        for _ in range(5):
            enqueue(app.storage, queue="later")
        with TestClient(create_api(app)) as client:

            def get(path: str, **params: Any) -> Any:
                r = client.get(path, headers=HEADERS["viewer"], params=params)
                assert r.status_code == 200, r.text
                return r.json()

            body = get("/api/dlq", page_size=5)
            assert (body["total"], body["total_is_lower_bound"], len(body["items"])) == (5, True, 5)
            whole = get("/api/dlq", page_size=10)
            assert (whole["total"], whole["total_is_lower_bound"]) == (6, False)
            jobs = get("/api/jobs", queue="later", page_size=2)
            assert (jobs["total"], jobs["total_is_lower_bound"]) == (4, True)
            audit = get("/api/audit", page_size=2)
            assert (audit["total"], audit["total_is_lower_bound"]) == (4, True)
            assert get("/api/audit", page_size=100)["total"] == 6
    finally:
        app.close()


def test_a_reason_filter_is_served_by_its_index(pg_url: str) -> None:
    """Filtered by failure reason alone, the page and its capped count read IX_JobsDLQ_Reason
    (migration 14): before it, a rare reason's page walked the whole DLQ in failure order."""
    from sqlalchemy import event, text

    from chokaq.domain.states import FailureReason
    from chokaq.storage import Storage

    storage = Storage(pg_url)
    storage.upgrade()
    make_dead(storage, 3, reason=FailureReason.TIMEOUT)
    sent: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:
        sent.append((statement, params))

    event.listen(storage.engine, "before_cursor_execute", record)
    try:
        page = AdminStore(storage, count_cap=2).list_jobs(
            Location.DLQ, JobFilter(failure_reason=FailureReason.TIMEOUT), page_size=2
        )
    finally:
        event.remove(storage.engine, "before_cursor_execute", record)
    assert (page.total, page.total_is_lower_bound) == (2, True)
    reads = [(s, p) for s, p in sent if '"FailureReason" =' in s]
    assert len(reads) == 2
    try:
        with storage.engine.connect() as c:
            c.execute(text("SET enable_seqscan = off"))  # three rows: ask whether an index *can* serve it
            raw = c.connection.driver_connection
            assert raw is not None
            for statement, params in reads:
                cur = raw.cursor()
                cur.execute("EXPLAIN " + statement, params)
                plan = "\n".join(r[0] for r in cur.fetchall())
                # Not IX_JobsDLQ_QueueReason: led by the queue, it is read in full for a reason alone.
                assert 'using "IX_JobsDLQ_Reason"' in plan, plan
    finally:
        storage.close()
