"""The Deck's files as the API serves them: every module with a JavaScript MIME type (browsers refuse
to run a module served otherwise), under a policy that allows scripts from the Deck's own origin."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from chokaq import ChokaQ
from chokaq.api.app import create_api
from chokaq.deck import STATIC_DIR


@pytest.fixture
def client(sqlite_url: str) -> Iterator[TestClient]:
    app = ChokaQ(storage_url=sqlite_url)
    try:
        with TestClient(create_api(app, dev_open=True)) as c:
            yield c
    finally:
        app.close()


def test_every_module_is_served_as_javascript(client: TestClient) -> None:
    modules = sorted(p.relative_to(STATIC_DIR).as_posix() for p in STATIC_DIR.rglob("*.js"))
    assert {"main.js", "api.js", "dom.js", "state.js", "live.js", "inspector.js", "charts.js"} <= set(modules)
    assert "views/lists.js" in modules and "deck.js" not in modules
    for name in modules:
        r = client.get(f"/deck/{name}")
        assert r.status_code == 200, name
        assert r.headers["content-type"].split(";")[0] == "text/javascript", (name, r.headers["content-type"])
        assert "script-src 'self'" in r.headers["content-security-policy"]


def test_the_page_loads_main_as_a_module_and_every_import_resolves(client: TestClient) -> None:
    page = client.get("/deck/")
    assert '<script type="module" src="main.js"></script>' in page.text
    # Follow the import graph from main.js: each relative import is a file the API serves.
    seen: set[str] = set()
    todo = ["main.js"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        source = client.get(f"/deck/{name}").text
        for spec in re.findall(r'^import [^;]* from "([^"]+)";', source, re.M):
            parts = [*name.split("/")[:-1], *spec.split("/")]
            resolved: list[str] = []
            for part in parts:
                if part == "..":
                    resolved.pop()
                elif part != ".":
                    resolved.append(part)
            todo.append("/".join(resolved))
    on_disk = {p.relative_to(STATIC_DIR).as_posix() for p in STATIC_DIR.rglob("*.js") if "vendor" not in p.parts}
    assert seen == on_disk  # every module is reached from main.js, and nothing main.js imports is missing
