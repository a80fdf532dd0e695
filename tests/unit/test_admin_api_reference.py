"""docs/admin-api.md's routes and schemas are what the OpenAPI document says (chokaq/api/reference.py)."""

from __future__ import annotations

import re

from chokaq.api.reference import BEGIN, END, METHODS, PAGE, openapi_and_roles, render


def test_the_committed_reference_is_what_the_openapi_document_generates() -> None:
    page = PAGE.read_text(encoding="utf-8")
    committed = page[page.index(BEGIN) : page.index(END) + len(END)]
    assert committed == render(*openapi_and_roles()), (
        "docs/admin-api.md differs from the API: run `python -m chokaq.api.reference` and commit the page"
    )


def test_every_route_is_there_with_its_role_and_answers() -> None:
    doc, roles = openapi_and_roles()
    region = render(doc, roles)
    routes = [(m.upper(), p) for p, item in doc["paths"].items() for m in METHODS if m in item]
    assert len(routes) >= 30
    for method, path in routes:
        section = region.split(f"### `{method} {path}`", 1)[1].split("\n### ", 1)[0]
        expected = "No sign-in." if path == "/api/health" else f"Role: {roles[f'{method} {path}']} or higher."
        assert expected in section, (method, path)
        statuses = re.findall(r"^\| (\d{3}) \|", section, flags=re.M)
        assert statuses == sorted(doc["paths"][path][method.lower()]["responses"]), (method, path)
    assert roles["POST /api/dlq/purge"] == "admin" and roles["POST /api/jobs"] == "operator"
    assert "### EnqueueIn {#schema-enqueuein}" in region  # request bodies' fields are listed


def test_the_hand_written_intro_stays_around_the_generated_part() -> None:
    page = PAGE.read_text(encoding="utf-8")
    intro, rest = page.split(BEGIN, 1)
    for heading in ("## Conventions", "## Roles and sign-in"):
        assert heading in intro
    assert "`validation_error`" in intro  # the error codes table
    after = rest.split(END, 1)[1]
    for heading in ("## Payload edits", "## Live events", "## Examples"):
        assert heading in after
