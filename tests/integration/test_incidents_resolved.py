"""A crash incident keeps counting the zombies that left the DLQ (docs/steps.md): resurrected one by
one or in bulk, purged, or judged by the handler's verify, each counted by what took it out, so an
incident of six zombies stays an incident of six ("2 undecided, 2 resurrected, 1 purged, 1
verified") until all are decided, and then stays on the record, decided. A zombie's later life (run
again, dead again on another worker) belongs to that other worker's incident. Dead jobs that were
not zombies never count."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from chokaq import ChokaQ
from chokaq.api import create_api
from chokaq.domain.states import FailureReason
from chokaq.storage import Actor, AdminStore, JobFilter, crash_incidents, settle_verdict
from chokaq.storage.schema import audit_log
from tests.api.helpers import HEADERS, enqueue, make_app, run_one
from tests.helpers import age

OPS = Actor("ops", "operator")


def dead(app: ChokaQ, worker: str, reason: FailureReason = FailureReason.ZOMBIE) -> str:
    s = app.storage
    job_id = enqueue(s)
    rec = run_one(s, job_id, worker=worker)
    assert s.fail(rec.lease, reason, "Zombie detected: heartbeat expired")
    return job_id


def counts(app: ChokaQ, **kw: Any) -> dict[str | None, tuple[int, int, int, int, int]]:
    """Per worker: (jobs, undecided, resurrected, purged, verified); ``jobs`` adds the retried ones."""
    found, capped = crash_incidents(app.storage, **kw)
    assert not capped
    return {i.worker_id: (i.jobs, i.undecided, i.resurrected, i.purged, i.verified) for i in found}


def test_zombies_taken_out_of_the_dlq_still_count_in_their_incident(db_url: str) -> None:
    app = make_app(db_url)
    admin = AdminStore(app.storage)
    z = [dead(app, "host-x") for _ in range(6)]
    other = dead(app, "host-y")
    not_a_zombie = dead(app, "host-x", FailureReason.MAX_RETRIES_EXCEEDED)
    assert counts(app) == {"host-x": (6, 6, 0, 0, 0), "host-y": (1, 1, 0, 0, 0)}

    admin.resurrect(z[0], OPS)
    admin.resurrect(z[1], OPS, steps="scratch")
    assert admin.purge_dlq(Actor("boss", "admin"), ids=[z[2], not_a_zombie]).affected == 2
    assert settle_verdict(admin, z[3], "done")
    assert settle_verdict(admin, z[4], "unknown")  # stays in the DLQ: still undecided
    assert counts(app) == {"host-x": (6, 2, 2, 1, 1), "host-y": (1, 1, 0, 0, 0)}

    # z[0] runs again and dies on another worker: a zombie of that worker's incident now.
    run_one(app.storage, z[0], worker="host-z")
    app.storage.fail(app.storage.get_job(z[0]).lease, FailureReason.ZOMBIE, "again")  # type: ignore[union-attr]
    assert counts(app)["host-z"] == (1, 1, 0, 0, 0) and counts(app)["host-x"] == (6, 2, 2, 1, 1)

    # The rest of host-x's incident in one previewed decision: decided, it stays on the record.
    f = JobFilter(worker="host-x", failure_reason=FailureReason.ZOMBIE)
    preview = admin.resurrect_many(OPS, f=f, dry_run=True)
    assert preview.matched == 2
    done = admin.resurrect_many(OPS, f=f, expected_count=preview.matched, snapshot=preview.snapshot)
    assert done.affected == 2
    assert counts(app) == {"host-x": (6, 0, 4, 1, 1), "host-y": (1, 1, 0, 0, 0), "host-z": (1, 1, 0, 0, 0)}
    # Past the window (Recovery.WorkerRetention through the API and the CLI), a decided incident is gone.
    assert counts(app, resolved_within=timedelta(0)) == {"host-y": (1, 1, 0, 0, 0), "host-z": (1, 1, 0, 0, 0)}

    with TestClient(create_api(app)) as client:
        items = client.get("/api/dlq/incidents", headers=HEADERS["viewer"]).json()["items"]
    x = next(i for i in items if i["worker_id"] == "host-x")
    assert (x["jobs"], x["undecided"], x["resurrected"], x["purged"], x["verified"]) == (6, 0, 4, 1, 1)
    assert x["sample_ids"] == [] and x["first_failed_utc"] and x["last_seen_utc"]
    assert other in next(i for i in items if i["worker_id"] == "host-y")["sample_ids"]
    app.close()


def test_zombies_the_sweep_retried_count_in_their_workers_incident(db_url: str) -> None:
    """retry_zombies types never reach the DLQ: the sweep sends their zombies back to Pending. Their
    worker's incident counts them ("12 jobs: 9 retried automatically, 3 need a decision"), from the
    audit row the sweep writes with each batch it retries (system:sweep)."""
    app = make_app(db_url, storage={"cleanup_batch_size": 2})  # batches of two: three transactions
    s = app.storage
    retried = [enqueue(s, type="idem") for _ in range(5)]
    buried = [enqueue(s, type="plain") for _ in range(2)]
    started = s.start("host-r", s.fetch("host-r", 10), zombie_retry_types={"idem"}).started
    assert {r.id for r in started} == set(retried + buried)
    for job_id in retried + buried:
        age(s, job_id, 3600)
    result = s.sweep(fetched_timeout=600, zombie_timeout=600, max_attempts=3)
    assert (result.retried_zombies, result.archived) == (5, 2)
    assert counts(app) == {"host-r": (7, 2, 0, 0, 0)}
    (incident,), _ = crash_incidents(s)
    assert incident.retried == 5 and incident.last_seen_utc is not None and incident.last_failed_utc is not None
    rows = s.read(lambda c: c.execute(select(audit_log).where(audit_log.c.Action == "sweep.zombie_retry")).all())
    assert sorted(r.JobCount for r in rows) == [1, 2, 2] and {r.Actor for r in rows} == {"system:sweep"}
    assert sorted(i for r in rows for i in json.loads(r.JobIds)) == sorted(retried)
    # A second sweep finds nothing more to retry, and writes no audit row.
    assert s.sweep(fetched_timeout=600, zombie_timeout=600, max_attempts=3).retried_zombies == 0
    assert counts(app) == {"host-r": (7, 2, 0, 0, 0)}
    app.close()
