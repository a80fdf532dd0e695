"""The Functions app, invoked through azure.functions objects against real SQLite and PostgreSQL:
the admin API through the ASGI function, the sweep and retention timers, and the drain worker."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

import azure.functions as func
import pytest
from azure.functions.timer import TimerRequest  # the concrete class (func.TimerRequest is abstract)

from chokaq import ChokaQ, FailureReason
from chokaq.domain.states import JobStatus, Location
from functions import build_function_app
from functions.api import auth_level
from functions.drain import drain_budget, function_timeout
from tests.api.helpers import HEADERS, enqueue, failed_total, make_app, make_archived, run_one

DRAIN_ENV = {"CHOKAQ_DRAIN_SCHEDULE": "0 */5 * * * *", "CHOKAQ_DRAIN_SECONDS": "20", "CHOKAQ_DRAIN_IDLE_SECONDS": "0.5"}


@pytest.fixture
def fapp(db_url: str) -> Iterator[ChokaQ]:
    app = make_app(
        db_url,
        execution={"heartbeat_interval_min": 0.05, "heartbeat_interval_max": 0.1, "shutdown_grace": 0.3},
        recovery={"processing_zombie_timeout": 0.35, "fetched_job_timeout": 0.35},
        retention={"archive_days": 0.000002},  # ~0.17 s
    )
    app.done = []  # type: ignore[attr-defined]

    @app.job("ok_v1", queue="work")
    def ok(payload: dict[str, Any]) -> None:
        app.done.append(payload["n"])  # type: ignore[attr-defined]

    @app.job("slow_v1", queue="slow")
    async def slow(payload: dict[str, Any]) -> None:
        await asyncio.sleep(60)

    try:
        yield app
    finally:
        app.close()


def functions_of(fa: func.FunctionApp) -> dict[str, Any]:
    return {f.get_function_name(): f for f in fa.get_functions()}


def http(
    method: str, path: str, *, headers: dict[str, str] | None = None, body: Any = None, query: str = ""
) -> func.HttpRequest:
    return func.HttpRequest(
        method=method,
        url=f"http://localhost:7071{path}{'?' + query if query else ''}",
        headers={"content-type": "application/json", **(headers or {})},
        params={},
        route_params={"route": path.lstrip("/")},
        body=json.dumps(body).encode() if body is not None else b"",
    )


def test_registered_functions_and_bindings(fapp: ChokaQ) -> None:
    fa = build_function_app(fapp, environ=DRAIN_ENV)
    fns = functions_of(fa)
    assert set(fns) == {"http_app_func", "sweep", "retention", "drain"}
    bindings = {name: json.loads(f.get_function_json())["bindings"][0] for name, f in fns.items()}
    assert bindings["http_app_func"]["authLevel"] == "FUNCTION" and bindings["http_app_func"]["route"] == "/{*route}"
    assert bindings["sweep"]["schedule"] == "%CHOKAQ_SWEEP_SCHEDULE%"
    assert bindings["retention"]["schedule"] == "%CHOKAQ_RETENTION_SCHEDULE%"
    assert bindings["drain"]["schedule"] == "%CHOKAQ_DRAIN_SCHEDULE%"
    # No drain without a schedule, nor for a bare app (it would reject every job as unknown).
    assert "drain" not in functions_of(build_function_app(fapp, environ={}))
    bare = ChokaQ(storage_url=fapp.settings.storage_url)
    assert set(functions_of(build_function_app(bare, environ=DRAIN_ENV))) == {"http_app_func", "sweep", "retention"}
    bare.close()


def test_a_bare_app_waits_for_handlers_quietly_and_a_handlerless_chokaq_app_warns(
    fapp: ChokaQ, caplog: pytest.LogCaptureFixture
) -> None:
    """CHOKAQ_APP empty is the documented bare app, as the example settings ship it: no warning at
    every start. CHOKAQ_APP naming an app without handlers is a mistake: a warning."""
    bare = ChokaQ(storage_url=fapp.settings.storage_url)
    try:
        with caplog.at_level("DEBUG", logger="chokaq.functions"):
            build_function_app(bare, environ=DRAIN_ENV)
        said = [(r.levelname, r.getMessage()) for r in caplog.records if "no handlers" in r.getMessage()]
        assert said == [
            ("DEBUG", "CHOKAQ_DRAIN_SCHEDULE is set but the app has no handlers (set CHOKAQ_APP): no drain")
        ]
        caplog.clear()
        build_function_app(bare, environ={**DRAIN_ENV, "CHOKAQ_APP": "myjobs:app"})
        said = [(r.levelname, r.getMessage()) for r in caplog.records if "no handlers" in r.getMessage()]
        assert said == [
            ("WARNING", "CHOKAQ_DRAIN_SCHEDULE is set but the app has no handlers (set CHOKAQ_APP): no drain")
        ]
    finally:
        bare.close()


def test_auth_level_setting() -> None:
    assert auth_level({}) == func.AuthLevel.FUNCTION
    assert auth_level({"CHOKAQ_FUNCTIONS_AUTH_LEVEL": "anonymous"}) == func.AuthLevel.ANONYMOUS
    with pytest.raises(ValueError, match="CHOKAQ_FUNCTIONS_AUTH_LEVEL"):
        auth_level({"CHOKAQ_FUNCTIONS_AUTH_LEVEL": "public"})
    fa = build_function_app(ChokaQ(storage_url="sqlite://"), environ={"CHOKAQ_FUNCTIONS_AUTH_LEVEL": "ANONYMOUS"})
    assert json.loads(functions_of(fa)["http_app_func"].get_function_json())["bindings"][0]["authLevel"] == "ANONYMOUS"


def test_http_function_serves_the_admin_api(fapp: ChokaQ) -> None:
    fa = build_function_app(fapp, environ={})
    handler = functions_of(fa)["http_app_func"].get_user_function()
    dead = None

    async def scenario() -> None:
        nonlocal dead
        r = await handler(http("GET", "/api/health"), None)
        assert r.status_code == 200 and json.loads(r.get_body()) == {"status": "ok", "db": "ok"}
        r = await handler(http("GET", "/api/stats"), None)
        assert r.status_code == 401 and json.loads(r.get_body())["error"] == "unauthenticated"
        r = await handler(
            http("POST", "/api/jobs", headers=HEADERS["operator"], body={"type": "ok_v1", "payload": {"n": 1}}), None
        )
        assert r.status_code == 201, r.get_body()
        job_id = json.loads(r.get_body())["id"]
        r = await handler(http("GET", "/api/jobs", headers=HEADERS["viewer"], query="queue=work"), None)
        assert [j["id"] for j in json.loads(r.get_body())["items"]] == [job_id]
        r = await handler(http("POST", "/api/jobs/cancel", headers=HEADERS["viewer"], body={"ids": [job_id]}), None)
        assert r.status_code == 403
        r = await handler(http("POST", "/api/jobs/cancel", headers=HEADERS["operator"], body={"ids": [job_id]}), None)
        assert json.loads(r.get_body()) == {"cancelled": 1, "skipped_ids": [], "was_running": []}
        r = await handler(http("POST", f"/api/dlq/{job_id}/resurrect", headers=HEADERS["operator"]), None)
        assert r.status_code == 200 and json.loads(r.get_body())["status"] == "Pending"
        # Buffered responses: the event stream answers with what it has plus one tick, then ends.
        r = await asyncio.wait_for(
            handler(http("GET", "/api/events", headers=HEADERS["viewer"], query=f"after={time.time() - 5}"), None), 10
        )
        text = r.get_body().decode()
        assert r.status_code == 200 and "job.resurrected" in text and "stats.updated" in text
        dead = job_id

    try:
        asyncio.run(scenario())
    finally:
        fa.startup_task_done = False  # its __del__ would start a new loop to shut down
    assert dead is not None and failed_total(fapp.storage, "work") == 0


def test_sweep_timer_moves_zombie_to_dlq_and_releases_abandoned(fapp: ChokaQ) -> None:
    s = fapp.storage
    zombie = enqueue(s, type="ok_v1", queue="z")
    run_one(s, zombie, worker="dead-worker")  # Processing, and then its worker "dies"
    abandoned = enqueue(s, type="ok_v1", queue="a")
    assert [r.id for r in s.fetch("gone-worker", 10, ["a"])] == [abandoned]
    time.sleep(0.5)  # past Recovery timeouts (0.35 s)
    sweep = functions_of(build_function_app(fapp, environ={}))["sweep"].get_user_function()
    sweep(TimerRequest(past_due=True))
    rec = s.get_job(zombie)
    assert rec is not None and rec.location is Location.DLQ and rec.failure_reason is FailureReason.ZOMBIE
    assert "heartbeat expired" in (rec.error_details or "") and rec.worker_id == "dead-worker"
    back = s.get_job(abandoned)
    assert back is not None and back.status is JobStatus.PENDING and back.worker_id is None
    assert failed_total(s, "z") == 1
    # Running it again finds nothing more.
    sweep(TimerRequest())
    assert failed_total(s, "z") == 1


def test_sweep_timer_stores_and_fires_the_codes_schedules(fapp: ChokaQ) -> None:

    from sqlalchemy import update

    from chokaq.storage import ScheduleStore
    from chokaq.storage.schema import schedules

    fapp.schedule("every-minute", "* * * * *", job="ok_v1", payload={"n": 7})
    sweep = functions_of(build_function_app(fapp, environ={}))["sweep"].get_user_function()
    sweep(TimerRequest())  # the first run in this host process stores the code's schedules
    store = ScheduleStore(fapp.storage)
    assert store.get("every-minute").last_job_id is None

    def make_due(c: Any) -> Any:  # its slot came (no sleeping): NextDueUtc back to this minute
        due = fapp.storage.db_now(c).replace(second=0, microsecond=0)
        c.execute(update(schedules).values(NextDueUtc=due))
        return due

    due = fapp.storage.write(make_due)
    sweep(TimerRequest())
    info = store.get("every-minute")
    assert info.last_slot_utc == due and info.last_job_id is not None
    job = fapp.storage.get_job(info.last_job_id)
    assert job is not None and (job.queue, job.payload) == ("work", '{"n":7}')
    sweep(TimerRequest())  # the same slot never twice
    assert store.get("every-minute").last_job_id == info.last_job_id


def test_retention_timer_purges_old_archive(fapp: ChokaQ) -> None:
    s = fapp.storage
    ids = make_archived(s, 4)
    time.sleep(0.3)
    retention = functions_of(build_function_app(fapp, environ={}))["retention"].get_user_function()
    retention(TimerRequest())
    assert all(s.get_job(i) is None for i in ids)
    from chokaq.storage.admin import AdminStore

    rows, _ = AdminStore(s).list_audit(actor="functions:retention")
    assert sum(r["details"]["deleted"] for r in rows) == 4


def test_retention_timer_purges_old_dlq_rows_only_when_dlq_days_is_set(fapp: ChokaQ) -> None:
    from chokaq.domain.states import FailureReason
    from chokaq.storage.admin import AdminStore

    s = fapp.storage
    ids = [enqueue(s, type="dead_v1", queue="dead") for _ in range(3)]
    for job in s.start("w", s.fetch("w", 3)).started:
        assert s.fail(job.lease, FailureReason.FATAL_ERROR, "boom")
    time.sleep(0.3)
    retention = functions_of(build_function_app(fapp, environ={}))["retention"].get_user_function()
    retention(TimerRequest())  # Retention.DlqDays unset: dead jobs stay, however old
    assert all(s.get_job(i).location is Location.DLQ for i in ids)  # type: ignore[union-attr]
    fapp.settings.retention.dlq_days = 0.000002  # ~0.17 s
    retention(TimerRequest())
    assert all(s.get_job(i) is None for i in ids)
    rows, _ = AdminStore(s).list_audit(actor="functions:retention")
    assert sum(r["details"]["deleted"] for r in rows if r["action"] == "dlq.retention") == 3


def test_drain_timer_archives_jobs(fapp: ChokaQ) -> None:
    s = fapp.storage
    ids = [enqueue(s, type="ok_v1", queue="work", payload=json.dumps({"n": n})) for n in range(5)]
    drain = functions_of(build_function_app(fapp, environ=DRAIN_ENV))["drain"].get_user_function()
    t0 = time.monotonic()
    asyncio.run(drain(TimerRequest()))
    assert time.monotonic() - t0 < 15  # returned on idle, well before CHOKAQ_DRAIN_SECONDS
    assert sorted(fapp.done) == [0, 1, 2, 3, 4]  # type: ignore[attr-defined]
    assert all(s.get_job(i).location is Location.ARCHIVE for i in ids)  # type: ignore[union-attr]
    assert next(q.succeeded_total for q in s.queue_stats() if q.queue == "work") == 5


def test_drain_is_time_boxed_and_gives_unfinished_work_back(fapp: ChokaQ) -> None:
    s = fapp.storage
    job = enqueue(s, type="slow_v1", queue="slow")
    env = {**DRAIN_ENV, "CHOKAQ_DRAIN_SECONDS": "0.5", "CHOKAQ_DRAIN_IDLE_SECONDS": "30"}
    drain = functions_of(build_function_app(fapp, environ=env))["drain"].get_user_function()
    t0 = time.monotonic()
    asyncio.run(drain(TimerRequest()))
    assert time.monotonic() - t0 < 10
    rec = s.get_job(job)
    # Stopped cooperatively within the grace: rescheduled, the attempt given back.
    assert rec is not None and rec.status is JobStatus.PENDING and rec.attempt_count == 0 and rec.worker_id is None


def test_drain_budget_fits_function_timeout(fapp: ChokaQ) -> None:
    assert function_timeout() == 600
    seconds, idle = drain_budget(fapp, {})
    assert (seconds, idle) == (240, 20)
    assert seconds + fapp.settings.execution.shutdown_grace + 30 <= function_timeout()
    clamped, _ = drain_budget(fapp, {"CHOKAQ_DRAIN_SECONDS": "3600"}, timeout=600)
    assert clamped == 600 - fapp.settings.execution.shutdown_grace - 30
    with pytest.raises(ValueError):
        drain_budget(fapp, {"CHOKAQ_DRAIN_SECONDS": "0"})


def test_function_app_module_loads_from_environment(monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> None:
    monkeypatch.setenv("CHOKAQ_STORAGE_URL", sqlite_url)
    monkeypatch.delenv("CHOKAQ_APP", raising=False)
    monkeypatch.setenv("CHOKAQ_DRAIN_SCHEDULE", "0 */5 * * * *")
    sys.modules.pop("function_app", None)
    module = importlib.import_module("function_app")
    try:
        assert isinstance(module.app, func.AsgiFunctionApp)
        assert set(functions_of(module.app)) == {"http_app_func", "sweep", "retention"}
    finally:
        sys.modules.pop("function_app", None)


def test_the_http_functions_events_carry_a_rescue_by_the_sweep_timer_of_another_instance(
    fapp: ChokaQ, db_url: str
) -> None:
    """Two Functions instances on one database: the sweep timer runs in one, the HTTP function in
    the other (each its own app and storage, as separate hosts are); the HTTP app's events carry the
    timer's rescue from the event feed, and its audit log the system's."""
    s = fapp.storage
    zombie = enqueue(s, type="ok_v1", queue="z")
    run_one(s, zombie, worker="dead-worker")
    time.sleep(0.5)  # past Recovery timeouts (0.35 s)
    timer_host = make_app(
        db_url,
        execution={"heartbeat_interval_min": 0.05, "heartbeat_interval_max": 0.1},
        recovery={"processing_zombie_timeout": 0.35, "fetched_job_timeout": 0.35},
    )
    try:
        sweep = functions_of(build_function_app(timer_host, environ={}))["sweep"].get_user_function()
        sweep(TimerRequest())
    finally:
        timer_host.close()
    fa = build_function_app(fapp, environ={})
    handler = functions_of(fa)["http_app_func"].get_user_function()
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        r = await handler(http("GET", "/api/events/recent", headers=HEADERS["viewer"]), None)
        seen["recent"] = json.loads(r.get_body())
        r = await handler(http("GET", "/api/audit", headers=HEADERS["viewer"]), None)
        seen["audit"] = json.loads(r.get_body())
        # A Deck reconnecting with the feed cursor it had before the rescue replays it.
        r = await asyncio.wait_for(
            handler(http("GET", "/api/events", headers={**HEADERS["viewer"], "Last-Event-ID": "0"}), None), 10
        )
        seen["stream"] = r.get_body().decode()

    try:
        asyncio.run(scenario())
    finally:
        fa.startup_task_done = False  # its __del__ would start a new loop to shut down
    (rescue,) = [e for e in seen["recent"]["events"] if e["kind"] == "zombie.rescue"]
    assert (rescue["archived"], rescue["ids"]) == (1, [zombie]) and seen["recent"]["cursor"] >= rescue["feed_id"]
    (audited,) = [a for a in seen["audit"]["items"] if a["action"] == "sweep.rescue"]
    assert audited["actor"] == "system:sweep" and audited["job_ids"] == [zombie]
    assert '"kind":"zombie.rescue"' in seen["stream"] and zombie in seen["stream"]
    assert f"id: {rescue['feed_id']}" in seen["stream"]
