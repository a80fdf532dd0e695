"""The doorbell against a real Azurite queue service and the real azure-storage-queue SDK: enqueues
ring (coalesced), the `wake` function invoked with the real message through azure.functions
objects runs the job, a duplicated or garbage ring runs nothing twice, and with Azurite down the
enqueue still succeeds and the drain timer (the backstop) runs the job."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import azure.functions as func
import pytest
from azure.functions import meta
from azure.functions.queue import QueueMessageInConverter
from azure.functions.timer import TimerRequest
from azure.storage.queue import QueueClient, TextBase64DecodePolicy

from chokaq import ChokaQ
from chokaq.domain.states import Location
from functions import build_function_app
from functions.doorbell import Ring, installed, parse
from functions.drain import slices_of
from tests.api.helpers import HEADERS, make_app
from tests.conftest import metric_total

from .conftest import Azurite

FAST = {
    "execution": {"heartbeat_interval_min": 0.05, "heartbeat_interval_max": 0.1, "shutdown_grace": 0.3},
    "recovery": {"processing_zombie_timeout": 0.35, "fetched_job_timeout": 0.35},
}
ENV = {"CHOKAQ_DRAIN_SCHEDULE": "0 */5 * * * *", "CHOKAQ_DRAIN_SECONDS": "20", "CHOKAQ_DRAIN_IDLE_SECONDS": "0.3"}


def new_queue_name() -> str:
    return f"bell-{uuid.uuid4().hex[:12]}"


def doorbell_app(db_url: str, queue_name: str, interval: float = 1.0) -> ChokaQ:
    app = make_app(db_url, functions={"doorbell_queue": queue_name, "doorbell_interval": interval}, **FAST)
    app.runs = Counter()  # type: ignore[attr-defined]
    lock = threading.Lock()

    @app.job("ok_v1", queue="work")
    def ok(payload: dict[str, Any]) -> None:
        with lock:
            app.runs[payload["n"]] += 1  # type: ignore[attr-defined]

    app.gate = threading.Event()  # type: ignore[attr-defined]

    @app.job("hold_v1", queue="work")
    def hold(payload: dict[str, Any]) -> None:
        """Runs until the test opens the gate: keeps a slice busy without any timing."""
        with lock:
            app.runs[payload["n"]] += 1  # type: ignore[attr-defined]
        assert app.gate.wait(60)  # type: ignore[attr-defined]

    return app


def fns(fa: Any) -> dict[str, Any]:
    return {f.get_function_name(): f.get_user_function() for f in fa.get_functions()}


def host_side_client(azurite: Azurite, queue_name: str) -> QueueClient:
    """What the Functions host does with the queue: base64 text messages, decoded for the function."""
    client = QueueClient.from_connection_string(
        azurite.connection_string, queue_name, message_decode_policy=TextBase64DecodePolicy()
    )
    return client


def as_trigger_input(body: str | bytes, *, id: str, dequeue_count: int, pop_receipt: str = "r") -> func.QueueMessage:
    """The func.QueueMessage the Python worker builds: through the library's own queue converter,
    from the payload and trigger metadata the host sends."""
    metadata = {
        "Id": meta.Datum(id, "string"),
        "DequeueCount": meta.Datum(dequeue_count, "int"),
        "PopReceipt": meta.Datum(pop_receipt, "string"),
    }
    datum = meta.Datum(body, "bytes" if isinstance(body, bytes) else "string")
    message: func.QueueMessage = QueueMessageInConverter.decode(datum, trigger_metadata=metadata)
    return message


def receive_as_host(client: QueueClient, timeout: float = 10.0) -> func.QueueMessage:
    """Poll until a message is visible, then hand it over as the host would (func.QueueMessage)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in client.receive_messages(messages_per_page=1, visibility_timeout=30, max_messages=1):
            client.delete_message(m)  # the host deletes it when the invocation succeeds
            return as_trigger_input(m.content, id=m.id, dequeue_count=m.dequeue_count, pop_receipt=m.pop_receipt)
        time.sleep(0.02)
    raise AssertionError(f"no doorbell message within {timeout}s")


@pytest.fixture
def bell_app(db_url: str, azurite: Azurite) -> Iterator[tuple[ChokaQ, Any, QueueClient]]:
    name = new_queue_name()
    app = doorbell_app(db_url, name)
    client = host_side_client(azurite, name)
    client.create_queue()
    fa = build_function_app(app, environ={**ENV, "ChokaqDoorbell": azurite.connection_string})
    try:
        yield app, fa, client
    finally:
        bell = installed(app)
        if bell is not None:
            bell.close()
        fa.startup_task_done = False  # AsgiFunctionApp's __del__ would start a loop to shut down
        app.close()


def test_wake_is_registered_on_the_doorbell_queue(bell_app: tuple[ChokaQ, Any, QueueClient]) -> None:
    _, fa, _ = bell_app
    (binding,) = next(
        json.loads(f.get_function_json())["bindings"] for f in fa.get_functions() if f.get_function_name() == "wake"
    )
    assert binding["type"] == "queueTrigger" and binding["direction"] == "IN"
    assert binding["queueName"] == "%CHOKAQ_FUNCTIONS__DOORBELL_QUEUE%"
    assert binding["connection"] == "ChokaqDoorbell"


def test_enqueue_rings_and_wake_runs_the_job(bell_app: tuple[ChokaQ, Any, QueueClient]) -> None:
    app, fa, client = bell_app
    f = fns(fa)
    # Enqueued through the admin API's HTTP function: the Functions app's own enqueues ring too.
    req = func.HttpRequest(
        method="POST",
        url="http://localhost:7071/api/jobs",
        headers={"content-type": "application/json", **HEADERS["operator"]},
        params={},
        route_params={"route": "api/jobs"},
        body=json.dumps({"type": "ok_v1", "payload": {"n": 1}}).encode(),
    )
    resp = asyncio.run(f["http_app_func"](req, None))
    assert resp.status_code == 201, resp.get_body()
    job_id = json.loads(resp.get_body())["id"]

    msg = receive_as_host(client)
    ring = parse(msg.get_body().decode())
    assert ring.understood and ring.queue == "work" and ring.at is not None
    assert app.storage.get_job(job_id).location is Location.HOT  # type: ignore[union-attr]

    asyncio.run(f["wake"](msg))
    rec = app.storage.get_job(job_id)
    assert rec is not None and rec.location is Location.ARCHIVE
    assert app.runs == {1: 1}  # type: ignore[attr-defined]


def test_a_burst_of_100_enqueues_rings_a_handful_of_times(db_url: str, azurite: Azurite) -> None:
    name = new_queue_name()
    app = doorbell_app(db_url, name, interval=1.0)
    client = host_side_client(azurite, name)
    client.create_queue()
    fa = build_function_app(app, environ={**ENV, "ChokaqDoorbell": azurite.connection_string})
    bell = installed(app)
    assert bell is not None
    try:
        t0 = time.monotonic()
        ids = []
        for n in range(100):
            ids.append(app.enqueue("ok_v1", {"n": n}))
            time.sleep(0.01)
        elapsed = time.monotonic() - t0
        assert bell.flush(30)
        rings = client.get_queue_properties().approximate_message_count
        # At most one ring per queue per interval, plus the trailing ring that announces the
        # last enqueue of the burst: bounded by the burst's length, not by the number of jobs.
        assert 1 <= rings <= elapsed / bell.interval + 2, (rings, elapsed)
        assert bell.sent == rings and bell.failed == 0
        # Every job still runs, from one wake.
        asyncio.run(fns(fa)["wake"](receive_as_host(client)))
        assert app.runs == dict.fromkeys(range(100), 1)  # type: ignore[attr-defined]
    finally:
        bell.close()
        fa.startup_task_done = False
        app.close()


def test_duplicated_and_garbage_rings_run_each_job_once(db_url: str) -> None:
    """Two instances (own apps, own slices) get the same message at once, a third gets garbage:
    the claim decides, so every job runs exactly once."""
    apps = [doorbell_app(db_url, "bell-dup") for _ in range(3)]
    shared: Counter[int] = Counter()
    for a in apps:
        a.runs = shared  # type: ignore[attr-defined]
    # No producer here: the rings are handed in directly; the connection is never used.
    env = {**ENV, "CHOKAQ_DRAIN_IDLE_SECONDS": "0.5", "ChokaqDoorbell": "UseDevelopmentStorage=true"}
    fas = [build_function_app(a, environ=env) for a in apps]
    for a in apps:
        bell = installed(a)
        assert bell is not None
        bell.close()  # keep this test off the network
    try:
        producer = ChokaQ(storage_url=apps[0].settings.storage_url)
        for n in range(40):
            producer.enqueue("ok_v1", {"n": n}, queue="work")
        producer.close()
        body = json.dumps({"queue": "work", "at": time.time()}).encode()
        msgs = [
            as_trigger_input(body, id="m1", dequeue_count=1),
            as_trigger_input(body, id="m1", dequeue_count=2),
            as_trigger_input(b"\x00not json", id="m2", dequeue_count=5),
        ]

        # Each "instance" runs on its own thread and loop, as separate hosts would.
        threads = [
            threading.Thread(target=asyncio.run, args=(fns(fa)["wake"](m),)) for fa, m in zip(fas, msgs, strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert shared == dict.fromkeys(range(40), 1)
        s = apps[0].storage
        assert next(q.succeeded_total for q in s.queue_stats() if q.queue == "work") == 40
        assert parse("\x00not json") == Ring("*", None, False)
    finally:
        for fa, a in zip(fas, apps, strict=True):
            fa.startup_task_done = False
            a.close()


def test_a_ring_during_a_running_slice_extends_it(bell_app: tuple[ChokaQ, Any, QueueClient]) -> None:
    """Same process: the second ring does not start a second worker; the running one stays on."""
    app, fa, client = bell_app
    wake = fns(fa)["wake"]
    first = app.enqueue("hold_v1", {"n": 1})
    m1 = receive_as_host(client)

    async def scenario() -> None:
        running = asyncio.create_task(wake(m1))
        while not app.runs:  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)  # the first slice is live and busy with job 1
        await asyncio.to_thread(app.enqueue, "ok_v1", {"n": 2})
        m2 = await asyncio.to_thread(receive_as_host, client)
        await wake(m2)  # returns at once: the live slice was poked
        app.gate.set()  # type: ignore[attr-defined]
        await running

    asyncio.run(scenario())
    assert app.runs == {1: 1, 2: 1}  # type: ignore[attr-defined]
    assert app.storage.get_job(first).location is Location.ARCHIVE  # type: ignore[union-attr]
    slices = slices_of(app)
    assert slices is not None and (slices.started, slices.poked) == (1, 1)


def test_azurite_down_enqueue_succeeds_and_the_timer_drain_runs_the_job(db_url: str, own_azurite: Azurite) -> None:
    name = new_queue_name()
    app = doorbell_app(db_url, name)
    client = host_side_client(own_azurite, name)
    client.create_queue()
    fa = build_function_app(app, environ={**ENV, "ChokaqDoorbell": own_azurite.connection_string})
    bell = installed(app)
    assert bell is not None
    try:
        app.enqueue("ok_v1", {"n": 0})
        assert bell.flush(30) and bell.sent == 1  # the bell works while Azurite is up
        failed_before = metric_total("chokaq.doorbell.rings", outcome="failed", queue="work")
        own_azurite.stop()

        job_id = app.enqueue("ok_v1", {"n": 1})  # the enqueue does not notice the outage
        assert app.storage.get_job(job_id).location is Location.HOT  # type: ignore[union-attr]
        assert bell.flush(60)
        assert bell.failed == 1 and bell.sent == 1
        assert metric_total("chokaq.doorbell.rings", outcome="failed", queue="work") == failed_before + 1

        asyncio.run(fns(fa)["drain"](TimerRequest()))  # the backstop
        rec = app.storage.get_job(job_id)
        assert rec is not None and rec.location is Location.ARCHIVE
        assert app.runs == {0: 1, 1: 1}  # type: ignore[attr-defined]
    finally:
        bell.close()
        fa.startup_task_done = False
        app.close()


def test_delayed_jobs_ring_when_they_fall_due(db_url: str, azurite: Azurite) -> None:
    name = new_queue_name()
    app = doorbell_app(db_url, name, interval=10.0)
    client = host_side_client(azurite, name)
    client.create_queue()
    fa = build_function_app(app, environ={**ENV, "ChokaqDoorbell": azurite.connection_string})
    bell = installed(app)
    assert bell is not None
    try:
        # Due times in the middle of one 10 s slot, about 30 s ahead: a fixed delay=30 would put
        # the five jobs in two slots whenever a slot boundary fell between two enqueues.
        target = (math.ceil((bell._clock() + 30) / bell.interval) - 0.5) * bell.interval
        for n in range(5):
            app.enqueue("ok_v1", {"n": n}, delay=target - bell._clock())  # same due-time slot: one ring
        assert bell.flush(30) and bell.sent == 1
        props = client.get_queue_properties()
        assert props.approximate_message_count == 1
        # Hidden until the jobs fall due: nothing to receive now.
        assert list(client.receive_messages(max_messages=1)) == []
    finally:
        bell.close()
        fa.startup_task_done = False
        app.close()


def test_message_body_is_base64_text_as_the_trigger_expects(azurite: Azurite) -> None:
    from functions.doorbell import AzureQueueSender, queue_client

    name = new_queue_name()
    sender = AzureQueueSender(queue_client(name, {"ChokaqDoorbell": azurite.connection_string}))
    sender("work", 0)  # creates the queue on first use (QueueNotFound)
    raw = QueueClient.from_connection_string(azurite.connection_string, name)
    (m,) = list(raw.receive_messages(max_messages=1))
    assert json.loads(base64.b64decode(m.content))["queue"] == "work"


def test_a_ring_logs_nothing_at_information(azurite: Azurite, caplog: pytest.LogCaptureFixture) -> None:
    # The SDK's HTTP logging policy writes each request and response (URL, headers) at INFO: about
    # a dozen lines per ring, on Azure billed as traces. The doorbell's client keeps it to warnings.
    from functions.doorbell import AzureQueueSender, queue_client

    name = new_queue_name()
    sender = AzureQueueSender(queue_client(name, {"ChokaqDoorbell": azurite.connection_string}))
    sender("work", 0)  # the first ring creates the queue
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        for _ in range(3):
            sender("work", 0)
    chatty = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert chatty == [], [f"{r.name}: {r.getMessage()[:80]}" for r in chatty]
    raw = QueueClient.from_connection_string(azurite.connection_string, name)
    assert len(list(raw.receive_messages(max_messages=10))) == 4  # every ring still went out
