"""One operations service for every surface: the rules the API, the CLI and the settings share,
the app's own event bus, and one public job shape (issue 16, items 3 and 6)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from sqlalchemy import update

from chokaq import ChokaQ
from chokaq.api import create_api
from chokaq.cli.admin_cmds import bind_hosts
from chokaq.cli.main import cli
from chokaq.domain.errors import ConfigurationError, JobValidationError
from chokaq.domain.models import EnqueueRequest
from chokaq.domain.states import FailureReason
from chokaq.operations.rules import is_loopback, parse_failure_reason, zombie_timeout_floor
from chokaq.operations.service import Operations, Selection
from chokaq.runtime.events import EVENT_KINDS
from chokaq.settings import load_settings
from chokaq.storage.admin import Actor, JobEdit
from chokaq.storage.schema import jobs_hot
from tests.api.helpers import HEADERS, enqueue, make_app, make_archived, make_dead, run_worker_until

OPS = HEADERS["operator"]
VIEWER = HEADERS["viewer"]


def run(url: str, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--db", url, *args], catch_exceptions=False)


# ---------------------------------------------------------------- one public job shape
def test_the_api_and_the_cli_print_the_same_job(app: ChokaQ, client: TestClient, db_url: str) -> None:
    hot = enqueue(
        app.storage,
        type="email_v1",
        payload='{"to": "a@b", "n": [1, 2.5, null]}',
        tags="x",
        idempotency_key="k-1",
        created_by="me",
    )
    (dead,) = make_dead(app.storage, 1, queue="m", details="boom\nline 2")
    (done,) = make_archived(app.storage, 1)
    for job_id in (hot, dead, done):
        api = client.get(f"/api/jobs/{job_id}", headers=VIEWER).json()
        shown = run(db_url, "job", "show", job_id)
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout) == api
        assert list(json.loads(shown.stdout)) == list(api)  # field for field, in the same order
    # The DLQ list: the CLI's --json items are the API's items.
    cli_page = json.loads(run(db_url, "dlq", "list", "--json").stdout)
    api_page = client.get("/api/dlq", headers=VIEWER).json()
    assert cli_page["items"] == api_page["items"] and cli_page["total"] == api_page["total"] == 1


@pytest.mark.parametrize("stored", ["{not json", '{"x": NaN}', "[" * 1500 + "]" * 1500])
def test_a_payload_broken_by_sql_is_shown_alike(app: ChokaQ, client: TestClient, db_url: str, stored: str) -> None:
    job_id = enqueue(app.storage)
    with app.storage.engine.begin() as c:  # a row an older version (or a hand-written UPDATE) left behind
        c.execute(update(jobs_hot).where(jobs_hot.c.Id == job_id).values(Payload=stored))
    api = client.get(f"/api/jobs/{job_id}", headers=VIEWER).json()
    assert api["payload_invalid"] is True and isinstance(api["payload"], str) and api["payload_problem"]
    assert json.loads(run(db_url, "job", "show", job_id).stdout) == api


# ---------------------------------------------------------------- rules written once
def test_the_zombie_timeout_floor_is_one_rule_for_settings_and_the_api(app: ChokaQ, client: TestClient) -> None:
    hb_max = app.settings.execution.heartbeat_interval_max
    floor = zombie_timeout_floor(hb_max)
    assert floor == 3 * hb_max
    # The API refuses just below the floor and takes the floor itself ...
    r = client.patch("/api/queues/default", headers=OPS, json={"zombie_timeout_seconds": int(floor) - 1})
    assert r.status_code == 422 and r.json()["error"] == "invalid"
    assert f">= {floor:g}s" in r.json()["detail"] and "HeartbeatIntervalMax" in r.json()["detail"]
    assert (
        client.patch(
            "/api/queues/default", headers=OPS, json={"zombie_timeout_seconds": int(floor), "create": True}
        ).status_code
        == 200
    )
    # ... and so do the settings, with the same words.
    with pytest.raises(ConfigurationError, match=rf"Queues\.q\.ZombieTimeoutSeconds .* >= {floor:g}s"):
        load_settings(queues={"q": {"zombie_timeout_seconds": int(floor) - 1}})
    assert load_settings(queues={"q": {"zombie_timeout_seconds": int(floor)}}).queues["q"].zombie_timeout_seconds


def test_failure_reasons_parse_alike_in_the_api_and_the_cli(app: ChokaQ, client: TestClient, db_url: str) -> None:
    make_dead(app.storage, 1, reason=FailureReason.ZOMBIE)
    for spelled in ("Zombie", "zombie", "2"):
        assert parse_failure_reason(spelled) is FailureReason.ZOMBIE
        assert client.get("/api/dlq", headers=VIEWER, params={"failure_reason": spelled}).json()["total"] == 1
        assert json.loads(run(db_url, "dlq", "list", "--reason", spelled, "--json").stdout)["total"] == 1
    assert parse_failure_reason("") is None and parse_failure_reason(None) is None
    with pytest.raises(JobValidationError) as refused:
        parse_failure_reason("sleepy")
    message = str(refused.value)
    api = client.get("/api/dlq", headers=VIEWER, params={"failure_reason": "sleepy"})
    assert api.status_code == 422 and api.json()["detail"] == message
    cli_out = run(db_url, "dlq", "list", "--reason", "sleepy")
    assert cli_out.exit_code == 2 and message in cli_out.stderr


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2", "0:0:0:0:0:0:0:1", "10.1.2.3"])
def test_serve_and_dev_agree_on_what_loopback_is(host: str) -> None:
    # Before, `serve` asked ipaddress (127.0.0.2 was loopback: no token warning, loopback Host names)
    # while `dev --open` refused every host but 127.0.0.1, localhost and ::1. Now both ask is_loopback.
    loopback = host in {"127.0.0.1", "localhost", "::1"}
    assert is_loopback(host) is loopback
    hosts = bind_hosts(host)
    assert hosts == (sorted({host, "127.0.0.1", "localhost", "::1"}) if loopback else [host])
    if not loopback:  # dev refuses before it opens a database or binds
        r = CliRunner().invoke(cli, ["--db", "sqlite:///:memory:", "dev", "--open", "--host", host])
        assert r.exit_code == 2 and "--open only works on a loopback --host" in r.output


# ---------------------------------------------------------------- the app's own bus
def test_two_apps_in_one_process_do_not_share_events(db_url: str) -> None:
    first, second = make_app(db_url), make_app(db_url)
    try:
        assert first.bus is not second.bus
        with TestClient(create_api(first)) as one, TestClient(create_api(second)) as two:
            t0 = time.time() - 0.001
            (dead,) = make_dead(first.storage, 1)
            assert one.post(f"/api/dlq/{dead}/resurrect", headers=OPS).status_code == 200
            mine = one.get("/api/events/recent", headers=VIEWER, params={"after": t0}).json()["events"]
            theirs = two.get("/api/events/recent", headers=VIEWER, params={"after": t0}).json()["events"]
        assert [(e["kind"], e["id"], e["actor"]) for e in mine] == [("job.resurrected", dead, "ops@example.com")]
        # The second app's bus heard nothing; its API hears the first's action as another
        # instance's would, from the event feed (make_dead's dead-letter, the audited resurrect).
        assert all("feed_id" in e for e in theirs)
        audited = [(e["action"], e["ids"], e["actor"]) for e in theirs if e["kind"] == "audit"]
        assert audited == [("dlq.resurrect", [dead], "ops@example.com")]

        # A worker's outcomes go to its own app's bus only.
        @first.job("noop_v1", queue="w")
        def noop(payload: object) -> None:
            return None

        ran = first.enqueue("noop_v1")
        run_worker_until(first, lambda: any(e.data.get("id") == ran for e in first.bus.recent), queues=["w"])
        assert [(e.kind, e.data["id"]) for e in first.bus.recent][-1] == ("job.archived", ran)
        assert list(second.bus.recent) == []
    finally:
        first.close()
        second.close()


def test_every_operator_action_announces_a_typed_event_naming_its_actor(app: ChokaQ) -> None:
    ops = Operations(app)
    who = Actor("ops@example.com", "operator")
    job_id, created = ops.enqueue(EnqueueRequest(type="t", payload="{}", created_by=who.name))
    assert created
    ops.cancel(who, [job_id])
    ops.edit_dead(who, job_id, JobEdit(tags="fixed"))
    ops.resurrect(who, job_id)
    ops.cancel(who, [job_id])
    ops.purge_dlq(who, Selection(ids=[job_id]))
    make_archived(app.storage, 1)
    ops.purge_archive(who, datetime.now(UTC).replace(tzinfo=None) + timedelta(days=1))
    ops.change_queue(who, "default", {"paused": True})
    seen = [(e.kind, e.data["actor"]) for e in app.bus.recent]
    assert [k for k, _ in seen] == [
        "job.updated",
        "job.failed",
        "job.updated",
        "job.resurrected",
        "job.failed",
        "job.purged",
        "job.purged",
        "queue.changed",
    ]
    assert {a for _, a in seen} == {who.name} and {k for k, _ in seen} <= set(EVENT_KINDS)
    # The audit names the same actor for every change the service made.
    rows, _ = ops.store.list_audit(actor=who.name, page=1, page_size=100)
    assert {r["action"] for r in rows} >= {"job.cancel", "dlq.resurrect", "dlq.purge", "archive.purge", "queue.update"}


def test_the_cli_announces_nothing_and_still_audits(app: ChokaQ, db_url: str) -> None:
    # The CLI's process serves no event stream: its service publishes nothing (the Deck learns of
    # the change from the database), while the audit records the actor as the API's does.
    (dead,) = make_dead(app.storage, 1)
    r = CliRunner().invoke(
        cli, ["--db", db_url, "dlq", "resurrect", dead, "--yes", "--actor", "cli:alice"], catch_exceptions=False
    )
    assert r.exit_code == 0, r.output
    assert list(app.bus.recent) == []
    rows, _ = Operations(app).store.list_audit(job_id=dead, page=1, page_size=10)
    assert [(x["actor"], x["role"], x["action"]) for x in rows] == [("cli:alice", "admin", "dlq.resurrect")]
    assert Operations(app, announce=False).cancel(Actor("cli:bob", "admin"), [enqueue(app.storage)]).affected == 1
    assert list(app.bus.recent) == []
