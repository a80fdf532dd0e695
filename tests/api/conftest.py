from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from chokaq import ChokaQ
from chokaq.api import create_api
from tests.api.helpers import make_app


@pytest.fixture
def app(db_url: str) -> Iterator[ChokaQ]:
    a = make_app(db_url)
    try:
        yield a
    finally:
        a.close()


@pytest.fixture
def client(app: ChokaQ) -> Iterator[TestClient]:
    with TestClient(create_api(app)) as c:
        yield c
