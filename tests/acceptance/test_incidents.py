"""A crash incident: one real worker SIGKILLed while running 20 three-step jobs (tests/apps/crashapp.py)
leaves 20 zombies that appear as one incident, with how many stopped inside a step and how many
between steps; one bulk resume for the incident is bound to its preview and refused (409) when a
21st zombie of that worker joins after the preview."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from chokaq.api import create_api
from chokaq.domain.models import EnqueueRequest
from tests.acceptance.conftest import run_cli
from tests.acceptance.test_crash import sweep
from tests.acceptance.test_steps_crash import lines
from tests.api.helpers import HEADERS, make_app
from tests.helpers import age, wait_for


def test_twenty_zombies_of_one_killed_worker_are_one_incident(db_url: str, tmp_path: Path, workers: Any) -> None:
    app = make_app(db_url)
    s = app.storage
    release = tmp_path / "release"
    inside = [s.enqueue(EnqueueRequest(type="three_steps", payload=json.dumps({"release": str(release)})))[0]
              for _ in range(10)]  # fmt: skip
    between = [
        s.enqueue(
            EnqueueRequest(type="three_steps", payload=json.dumps({"release": str(release), "pause": "between"}))
        )[0]
        for _ in range(10)
    ]
    record = tmp_path / "record.txt"
    proc = workers(db_url, record, "--concurrency", "20")
    wait_for(lambda: all("inside:two" in lines(record, j) for j in inside), timeout=60)
    wait_for(lambda: all("between:one-two" in lines(record, j) for j in between), timeout=60)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    buried = [0]

    def all_buried() -> bool:
        buried[0] += sweep(db_url)["archived"]
        return buried[0] == 20

    wait_for(all_buried, timeout=60, interval=0.2)
    worker_id = s.get_job(inside[0]).worker_id  # type: ignore[union-attr]

    ops = HEADERS["operator"]
    with TestClient(create_api(app)) as client:
        (incident,) = client.get("/api/dlq/incidents", headers=HEADERS["viewer"]).json()["items"]
        assert incident["worker_id"] == worker_id and incident["jobs"] == incident["undecided"] == 20
        assert (incident["inside_step"], incident["between_steps"], incident["without_steps"]) == (10, 10, 0)
        assert incident["last_seen_utc"] and len(incident["sample_ids"]) == 20
        # The CLI prints the same incident.
        out = run_cli(db_url, "dlq", "incidents")
        assert out.returncode == 0, out.stderr
        assert [(i["worker_id"], i["jobs"]) for i in json.loads(out.stdout)["items"]] == [(worker_id, 20)]

        # One decision for the incident: preview it...
        body: dict[str, Any] = {"filter": {"worker": worker_id, "failure_reason": "Zombie"}, "max_jobs": 1000}
        preview = client.post("/api/dlq/resurrect", headers=ops, json={**body, "dry_run": True}).json()
        assert preview["matched"] == 20
        # ...then a 21st zombie of that worker lands (its last job, found late by the sweep).
        late, _ = s.enqueue(EnqueueRequest(type="three_steps", payload=json.dumps({"release": str(release)})))
        assert [r.id for r in s.start(worker_id, s.fetch(worker_id, 1)).started] == [late]  # type: ignore[arg-type]
        age(s, late, 3600)
        assert sweep(db_url)["archived"] == 1
        confirmed = {**body, "expected_count": preview["matched"], "snapshot": preview["snapshot"]}
        refused = client.post("/api/dlq/resurrect", headers=ops, json=confirmed)
        assert refused.status_code == 409 and "21 dead jobs match" in refused.text
        assert client.get("/api/dlq/incidents", headers=HEADERS["viewer"]).json()["items"][0]["jobs"] == 21
        # Previewed again, it resumes all 21 (their journals kept), audited as one action.
        again = client.post("/api/dlq/resurrect", headers=ops, json={**body, "dry_run": True}).json()
        done = client.post(
            "/api/dlq/resurrect",
            headers=ops,
            json={**body, "expected_count": again["matched"], "snapshot": again["snapshot"]},
        )
        assert done.status_code == 200 and done.json()["affected"] == 21
        # Decided, the incident stays on the record: 21 zombies, all resurrected, none undecided.
        (after,) = client.get("/api/dlq/incidents", headers=HEADERS["viewer"]).json()["items"]
        assert (after["worker_id"], after["jobs"], after["undecided"], after["resurrected"]) == (worker_id, 21, 0, 21)
        assert after["sample_ids"] == [] and after["last_seen_utc"] == incident["last_seen_utc"]
    app.close()
