"""The circuit breakers' routes: the list shows an open breaker, an operator closes it (audited,
announced as breaker.changed), a viewer cannot, and bad input is a 4xx with nothing changed."""

from __future__ import annotations

from fastapi.testclient import TestClient

from chokaq import ChokaQ
from chokaq.domain.breakers import BreakerPolicy
from chokaq.storage import BreakerStore
from tests.api.helpers import HEADERS

OPS, VIEWER = HEADERS["operator"], HEADERS["viewer"]


def open_breaker(app: ChokaQ, job_type: str = "mailer") -> None:
    store = BreakerStore(app.storage)
    for _ in range(2):
        store.record_failure(job_type, BreakerPolicy(failure_threshold=2), "worker-1")


def test_list_and_close(app: ChokaQ, client: TestClient) -> None:
    assert client.get("/api/breakers", headers=VIEWER).json() == {"items": []}
    open_breaker(app)
    BreakerStore(app.storage).record_failure("other", BreakerPolicy(failure_threshold=5), "worker-1")
    items = client.get("/api/breakers", headers=VIEWER).json()["items"]
    assert [(i["job_type"], i["state"], i["failure_count"]) for i in items] == [
        ("mailer", "open", 2),
        ("other", "closed", 1),
    ]
    assert items[0]["open_until_utc"] and items[0]["updated_by"] == "worker-1"

    assert client.post("/api/breakers/mailer/close", headers=VIEWER).status_code == 403
    assert client.get("/api/breakers", headers=VIEWER).json()["items"][0]["state"] == "open"

    seen = len(app.bus.recent)
    r = client.post("/api/breakers/mailer/close", headers=OPS)
    assert r.status_code == 200
    assert (r.json()["state"], r.json()["failure_count"], r.json()["updated_by"]) == ("closed", 0, "ops@example.com")
    events = [e for e in list(app.bus.recent)[seen:] if e.kind == "breaker.changed"]
    assert [(e.data["type"], e.data["old"], e.data["new"]) for e in events] == [("mailer", "open", "closed")]
    audit = client.get("/api/audit", headers=VIEWER).json()["items"]
    assert audit[0]["action"] == "breaker.close" and audit[0]["actor"] == "ops@example.com"

    # Closed already: nothing changes, no second audit row.
    assert client.post("/api/breakers/mailer/close", headers=OPS).json()["state"] == "closed"
    assert [i["action"] for i in client.get("/api/audit", headers=VIEWER).json()["items"]].count("breaker.close") == 1


def test_bad_input(client: TestClient) -> None:
    r = client.post("/api/breakers/nope/close", headers=OPS)
    assert r.status_code == 404 and "nope" in r.json()["detail"]
    assert client.post("/api/breakers/%20lead/close", headers=OPS).status_code == 422
    assert client.post(f"/api/breakers/{'x' * 300}/close", headers=OPS).status_code == 422
