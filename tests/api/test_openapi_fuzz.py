"""schemathesis against the OpenAPI document, as an admin, on SQLite: no 5xx, and every response
matches its documented schema; then the same operations from callers the request gate refuses
(anonymous cross-site, oversized), and random headers and bodies against the gate itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error, response_schema_conformance

from chokaq.api import create_api
from chokaq.domain import limits
from tests.api.helpers import HEADERS, make_app, make_dead


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    db = Path(tmp_path_factory.mktemp("fuzz")) / "chokaq.db"
    app = make_app(f"sqlite:///{db}")
    make_dead(app.storage, 3)
    api = create_api(app)
    schemathesis.experimental.OPEN_API_3_1.enable()  # FastAPI documents OpenAPI 3.1
    # The SSE stream never ends by itself; it has its own tests.
    yield schemathesis.from_asgi("/openapi.json", api).exclude(path="/api/events")
    app.close()


schema = schemathesis.from_pytest_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms(case: Any) -> None:
    case.call_and_validate(headers=HEADERS["admin"], checks=(not_a_server_error, response_schema_conformance))


@schema.parametrize()
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_never_500s_for_callers_the_gate_refuses(case: Any) -> None:
    """Anonymous, cross-site and oversized callers: the request gate answers, never a 5xx."""
    case.call_and_validate(
        headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, checks=(not_a_server_error,)
    )
    case.call_and_validate(
        headers={**HEADERS["operator"], "Content-Length": str(limits.MAX_REQUEST_BYTES + 1)},
        checks=(not_a_server_error,),
    )


@given(
    method=st.sampled_from(["POST", "PATCH", "PUT", "DELETE", "GET"]),
    path=st.sampled_from(
        ["/api/jobs", "/api/dlq/purge", "/api/dlq/x/resurrect", "/api/queues/q", "/deck/", "/api/health"]
    ),
    ctype=st.sampled_from([None, "application/json", "text/plain", "application/json; charset=utf-8", "", "a/b"]),
    body=st.binary(max_size=300),
    extra=st.dictionaries(
        st.sampled_from(
            ["Origin", "Sec-Fetch-Site", "X-ChokaQ-Request", "Host", "X-MS-CLIENT-PRINCIPAL", "Authorization"]
        ),
        st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40),
        max_size=3,
    ),
)
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_request_gate_never_500s(
    gate_client: Any, method: str, path: str, ctype: str | None, body: bytes, extra: dict[str, str]
) -> None:
    headers = {**extra}
    if ctype is not None:
        headers["Content-Type"] = ctype
    r = gate_client.request(method, path, headers=headers, content=body)
    assert r.status_code < 500, (method, path, headers, r.text)


@pytest.fixture(scope="module")
def gate_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    db = Path(tmp_path_factory.mktemp("gate")) / "chokaq.db"
    app = make_app(f"sqlite:///{db}", admin={"trust_app_service_auth": True, "trust_app_service_auth_unverified": True})
    with TestClient(create_api(app), raise_server_exceptions=False) as client:
        yield client
    app.close()
