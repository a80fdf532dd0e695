"""schemathesis against the OpenAPI document, as an admin, on SQLite: no 5xx, and every response
matches its documented schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance

from chokaq.api import create_api
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
