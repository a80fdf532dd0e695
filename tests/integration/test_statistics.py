"""PostgreSQL planner statistics after a burst: workers refresh them so claims walk the fetch index
again instead of sorting the whole backlog (Storage.RefreshStatistics)."""

from __future__ import annotations

import re
import threading
import time
import uuid
from typing import Any

from sqlalchemy import make_url, text

from chokaq import ChokaQ
from chokaq.domain.models import EnqueueRequest
from chokaq.storage import Storage
from chokaq.storage.claims import ClaimOptions, claim_query
from chokaq.storage.dialects import PROFILES
from chokaq.storage.statements import claim_statement
from chokaq.storage.store import Completion
from tests.helpers import wait_for


def claim_plan(app: ChokaQ) -> str:
    comp = claim_statement(False, False, 20).compile(dialect=app.storage.engine.dialect)
    params: dict[str, Any] = {**comp.params, "claim_worker": "w-plan", "claim_skip": []}

    def explain(c: Any) -> str:
        rows = c.exec_driver_sql("EXPLAIN " + comp.string, params).all()
        c.rollback()  # EXPLAIN without ANALYZE claims nothing; roll back anyway
        return "\n".join(r[0] for r in rows)

    with app.storage.engine.connect() as c:
        return explain(c)


def changed_since_analyze(app: ChokaQ) -> int:
    sql = "SELECT n_mod_since_analyze FROM pg_stat_user_tables WHERE schemaname = 'chokaq' AND relname = 'JobsHot'"
    return int(app.storage.read(lambda c: c.execute(text(sql)).scalar_one()))


def without_autovacuum(app: ChokaQ) -> None:
    """Autovacuum must not analyse the table behind the test's back (it may visit at any moment)."""
    app.storage.write(lambda c: c.execute(text('ALTER TABLE chokaq."JobsHot" SET (autovacuum_enabled = false)')))


def burst(app: ChokaQ, n: int = 20_000) -> None:
    without_autovacuum(app)
    for _ in range(n // 4000):
        app.storage.enqueue_many([EnqueueRequest(type="t", payload="{}") for _ in range(4000)])
    # Backends report their counts about once a second.
    wait_for(lambda: changed_since_analyze(app) >= n, timeout=15)


def test_refresh_statistics_after_a_burst(pg_url: str) -> None:
    app = ChokaQ(storage_url=pg_url)
    app.storage.upgrade()
    burst(app)
    # The hazard: never analysed, the planner expects a handful of Pending rows and reads and
    # sorts all of them for every claim.
    stale = claim_plan(app)
    assert "Sort" in stale and "Bitmap Heap Scan" in stale, stale

    assert app.storage.refresh_statistics() is True
    assert changed_since_analyze(app) < 1000
    fresh = claim_plan(app)
    # With statistics the claim walks the fetch index in order and stops after 20 rows.
    assert 'Index Scan using "IX_JobsHot_FetchAny"' in fresh, fresh
    assert "Sort" not in fresh, fresh
    # Nothing changed since: the next check leaves the statistics alone.
    assert app.storage.refresh_statistics() is False
    app.close()


def live_rows_reported(app: ChokaQ) -> int:
    sql = "SELECT n_live_tup FROM pg_stat_user_tables WHERE schemaname = 'chokaq' AND relname = 'JobsHot'"
    return int(app.storage.read(lambda c: c.execute(text(sql)).scalar_one()))


def test_a_burst_is_analysed_before_its_rows_are_reported(pg_url: str) -> None:
    # A backend reports its row counts at commit only if it last reported over a second ago, else
    # up to ten seconds later: a burst that workers drain in a few seconds would be claimed with
    # the sorting plan all along if the check waited for the counts. The file's size shows it at once.
    app = ChokaQ(storage_url=pg_url)
    app.storage.upgrade()
    without_autovacuum(app)
    rows = (
        'INSERT INTO chokaq."JobsHot" ("Id", "Queue", "Type", "Payload", "ScheduledAtUtc", "CreatedAtUtc", '
        "\"LastUpdatedUtc\") SELECT 'b-' || :tag || '-' || g, 'default', 't', '{}', now(), now(), now() "
        "FROM generate_series(1, :n) AS g"
    )
    with app.storage.engine.connect() as c:  # a new backend: its first commit reports at once
        c.execute(text(rows), {"tag": "first", "n": 1})
        c.commit()
        c.execute(text(rows), {"tag": "burst", "n": 20_000})  # committed within the second: held back
        c.commit()
    reported = live_rows_reported(app)
    assert app.storage.refresh_statistics() is True, f"{reported} live rows reported"
    plan = claim_plan(app)
    assert 'Index Scan using "IX_JobsHot_FetchAny"' in plan, plan
    assert "Sort" not in plan, plan
    # Analysed at that size: the same file is not analysed again.
    assert app.storage.refresh_statistics(min_age=3600) is False
    app.close()


def relpages(app: ChokaQ) -> int:
    sql = "SELECT relpages FROM pg_class WHERE oid = 'chokaq.\"JobsHot\"'::regclass"
    return int(app.storage.read(lambda c: c.execute(text(sql)).scalar_one()))


def test_a_role_that_may_not_analyse_does_not_try(pg_url: str) -> None:
    # A worker whose role owns neither JobsHot nor the database: PostgreSQL would skip its ANALYZE
    # with a warning, on every check while the (late) counts say the table grew. It does not try.
    app = ChokaQ(storage_url=pg_url)
    app.storage.upgrade()
    without_autovacuum(app)
    app.storage.enqueue_many([EnqueueRequest(type="t", payload="{}") for _ in range(3000)])
    role = f"chokaq_reader_{uuid.uuid4().hex[:8]}"
    grants = [
        f"CREATE ROLE {role} LOGIN",
        f"GRANT USAGE ON SCHEMA chokaq TO {role}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA chokaq TO {role}",
    ]
    app.storage.write(lambda c: [c.execute(text(g)) for g in grants])
    reader = Storage(make_url(pg_url).set(username=role).render_as_string(hide_password=False))
    try:
        for _ in range(3):
            assert reader.refresh_statistics() is False  # the file grew, but it cannot analyse
        assert relpages(app) == 0
        # Nobody here keeps the statistics current, so the claim stays unprepared: planned per
        # call from the table's current size, never a generic plan that outlives a burst.
        assert len([job for _ in range(8) for job in reader.fetch("w", 2)]) == 16  # past psycopg's threshold
        link = reader.tx.executor._local.link
        prepared = [r[0] for r in link.raw.execute("SELECT statement FROM pg_prepared_statements")]
        assert not any("SKIP LOCKED" in sql for sql in prepared), prepared
    finally:
        reader.close()
        app.storage.write(lambda c: [c.execute(text(f"DROP OWNED BY {role}")), c.execute(text(f"DROP ROLE {role}"))])
        app.close()


def test_growth_is_analysed_at_once_drift_only_after_a_while(pg_url: str) -> None:
    app = ChokaQ(storage_url=pg_url)
    app.storage.upgrade()
    burst(app, 4000)
    assert app.storage.refresh_statistics() is True  # 4,000 rows where the planner counted none
    claimed = app.storage.fetch("w-drift", 1500)
    assert len(claimed) == 1500
    wait_for(lambda: changed_since_analyze(app) >= 1500, timeout=15)
    # Over 10% changed, but the table did not grow and was analysed moments ago: left alone,
    # so a busy queue is not analysed on every check.
    assert app.storage.refresh_statistics(min_age=3600) is False
    assert app.storage.refresh_statistics(min_age=0) is True
    # A burst does not wait for the last ANALYZE to age: 4,000 + 8,000 rows against 4,000 counted.
    burst(app, 8000)
    assert app.storage.refresh_statistics(min_age=3600) is True
    assert app.storage.refresh_statistics(min_age=0) is False  # now nothing is stale
    app.close()


def test_a_starting_worker_refreshes_them(pg_url: str) -> None:
    app = ChokaQ(storage_url=pg_url)
    app.storage.upgrade()
    burst(app)
    worker = app.worker(queues=["elsewhere"])  # claims none of the burst; only the check matters
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: changed_since_analyze(app) < 1000, timeout=15)
    finally:
        worker.stop()
        thread.join(30)
    assert 'Index Scan using "IX_JobsHot_FetchAny"' in claim_plan(app)
    app.close()


def test_an_idle_worker_checks_rarely(pg_url: str) -> None:
    app = ChokaQ(storage_url=pg_url, storage={"listen_notify": False, "polling_interval": 0.05})
    app.storage.upgrade()
    ops: list[str] = []
    app.storage.fault_injector = ops.append
    worker = app.worker()
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    started = time.monotonic()
    thread.start()
    try:
        # 80 empty polls 50 ms apart: at least 4 s of an idle worker, no backlog, no burst to see.
        wait_for(lambda: worker.stats["fetches"] >= 80, timeout=30)
    finally:
        worker.stop()
        thread.join(30)
    elapsed = time.monotonic() - started
    # The check at start, then one every 8-12 s: never the once-a-second pace of a busy worker.
    assert ops.count("statistics_check") <= 1 + int(elapsed / 8), (ops.count("statistics_check"), elapsed)
    app.close()


def test_the_setting_turns_it_off(pg_url: str) -> None:
    app = ChokaQ(
        storage_url=pg_url, storage={"refresh_statistics": False, "listen_notify": False, "polling_interval": 0.05}
    )
    app.storage.upgrade()
    burst(app, 8000)
    worker = app.worker(queues=["elsewhere"])
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: worker.stats["fetches"] >= 3, timeout=15)  # running and polling
    finally:
        worker.stop()
        thread.join(30)
    assert changed_since_analyze(app) >= 8000
    app.close()


def test_refresh_statistics_is_a_no_op_elsewhere(tmp_path: Any) -> None:
    app = ChokaQ(storage_url=f"sqlite:///{tmp_path / 's.db'}")
    app.storage.upgrade()
    app.storage.enqueue_many([EnqueueRequest(type="t", payload="{}") for _ in range(2000)])
    assert app.storage.refresh_statistics() is False
    app.close()


def test_storage_names_what_it_supports(db_url: str) -> None:
    # The worker asks these, not the dialect: NOTIFY wake-ups and planner statistics are PostgreSQL's.
    app = ChokaQ(storage_url=db_url)
    on_pg = db_url.startswith("postgresql")
    assert app.storage.supports_notify is on_pg
    assert app.storage.supports_statistics_refresh is on_pg
    app.close()


def prepared_claim_plan(storage: Storage) -> str:
    """EXPLAIN of the prepared claim on this thread's hot-path connection, as a worker with two
    free slots runs it (the claim into Fetched, all queues, nothing to skip)."""
    import psycopg

    link = storage.tx.executor._local.link  # this thread's connection, where the statements ran
    names = [
        r[0] for r in link.raw.execute("SELECT name, statement FROM pg_prepared_statements") if "SKIP LOCKED" in r[1]
    ]
    assert len(names) == 1, names  # the claim is prepared
    stmt, params = claim_query(PROFILES["postgresql"], "w", 2, None, limited=False, options=ClaimOptions(False, (), ()))
    rendered = storage.tx.executor.rendered(stmt, params)
    values = rendered.bind(params)
    assert isinstance(values, dict)
    order = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", rendered.sql)))  # psycopg's $1, $2, ...
    args = ", ".join(["%s"] * len(order))
    rows = psycopg.ClientCursor(link.raw).execute(f"EXPLAIN EXECUTE {names[0]}({args})", [values[k] for k in order])
    return "\n".join(r[0] for r in rows)


def test_the_prepared_claim_is_planned_afresh_once_jobshot_is_analysed(pg_url: str) -> None:
    # Where the statistics check runs and this role may ANALYZE, the claim is prepared too. A
    # burst into a never-analysed JobsHot is claimed with a plan that sorts the backlog, prepared or
    # not; once the check has analysed the table, PostgreSQL plans the prepared claim again, and it
    # walks the fetch index.
    app = ChokaQ(storage_url=pg_url)
    app.storage.upgrade()
    without_autovacuum(app)
    assert app.storage.refresh_statistics() is False  # a worker's first check: nothing to do yet
    burst(app)
    claimed = [job for _ in range(8) for job in app.storage.fetch("w", 2)]  # past the custom plans
    assert len(claimed) == 16
    for one in [Completion(lease=job.lease, duration_ms=1.0) for job in claimed]:
        app.storage.complete("w", [one])
    link = app.storage.tx.executor._local.link
    prepared = [r[0] for r in link.raw.execute("SELECT statement FROM pg_prepared_statements").fetchall()]
    assert any('"JobsArchive"' in sql for sql in prepared), prepared  # the move is prepared
    assert 'Sort Key: cand."Priority" DESC' in prepared_claim_plan(app.storage)  # the backlog, sorted per claim
    assert app.storage.refresh_statistics()
    after = prepared_claim_plan(app.storage)
    assert "Sort Key: cand." not in after, after
    assert re.search(r'Index Scan using "IX_JobsHot_Fetch\w*" on "JobsHot" cand', after), after
    app.close()
