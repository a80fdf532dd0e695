"""One payload gate at every entrance, and reading that never fails on a stored row."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from sqlalchemy import update

from chokaq import ChokaQ
from chokaq.cli.main import cli
from chokaq.domain import limits
from chokaq.domain.errors import JobValidationError
from chokaq.domain.payload import encode_payload, parse_payload_text, readable
from chokaq.domain.states import Location
from chokaq.storage.schema import jobs_archive, jobs_dlq, jobs_hot
from tests.api.helpers import HEADERS, enqueue, make_archived, make_dead

ADMIN, VIEWER = HEADERS["admin"], HEADERS["viewer"]


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


BAD_TEXTS = {
    "nan": '{"x": NaN}',
    "infinity": "[Infinity, -Infinity]",
    "float overflow": "1e400",
    "lone surrogate escape": '"\\udfff"',
    "lone surrogate key": '{"\\ud800": 1}',
    "nul escape": '{"a": "x\\u0000y"}',
    "deep 65": nested(limits.MAX_PAYLOAD_DEPTH + 1),
    "deep 300 objects": '{"a":' * 300 + "1" + "}" * 300,
    "deep 100000": nested(100_000),
    "not json": "{oops",
}


@pytest.mark.parametrize("text", BAD_TEXTS.values(), ids=BAD_TEXTS.keys())
def test_gate_refuses(text: str) -> None:
    with pytest.raises(JobValidationError):
        parse_payload_text(text)


def test_gate_accepts_and_round_trips() -> None:
    for text in (nested(limits.MAX_PAYLOAD_DEPTH), '"\\ud83d\\ude00 é \\n"', '{"a": [1, 2.5, -3e10, null, true]}'):
        value = parse_payload_text(text)
        assert json.loads(json.dumps(value, allow_nan=False)) == value
    raw_surrogate = "\udfff"
    with pytest.raises(JobValidationError, match="surrogate"):
        parse_payload_text(f'"{raw_surrogate}"')
    with pytest.raises(JobValidationError):
        encode_payload({"x": float("nan")})
    with pytest.raises(JobValidationError, match="nested"):
        encode_payload(json.loads(nested(200)))
    with pytest.raises(JobValidationError, match="bytes"):
        encode_payload("x" * limits.MAX_PAYLOAD_BYTES)


def test_api_payload_and_payload_text_are_refused_alike(app: ChokaQ, client: TestClient) -> None:
    job = enqueue(app.storage, payload='{"ok": 1}')
    for name, text in BAD_TEXTS.items():
        if name == "deep 100000":
            continue  # the request body itself is nested too deep to be JSON-parsed: 4xx below
        r = client.patch(f"/api/jobs/{job}", headers=ADMIN, json={"payload_text": text})
        assert r.status_code == 422, (name, r.text)
        assert r.json()["error"] == "payload_invalid"
    r = client.post("/api/jobs", headers=ADMIN, json={"type": "t", "payload": json.loads(nested(300))})
    assert r.status_code == 422 and "nested" in r.text
    # NaN as `payload` (Python's json accepts it in the body) is refused the same way.
    r = client.post(
        "/api/jobs",
        headers={**ADMIN, "Content-Type": "application/json"},
        content=b'{"type": "t", "payload": {"x": NaN}}',
    )
    assert r.status_code == 422, r.text
    r = client.patch(
        f"/api/jobs/{job}",
        headers={**ADMIN, "Content-Type": "application/json"},
        content=json.dumps({"payload_text": nested(100_000)}).encode(),
    )
    assert r.status_code == 422
    r = client.patch(
        f"/api/jobs/{job}",
        headers={**ADMIN, "Content-Type": "application/json"},
        content=b'{"payload_text": "\\udfff"}',
    )
    assert r.status_code == 422, r.text
    # Nothing was stored; the list still answers.
    assert client.get(f"/api/jobs/{job}", headers=VIEWER).json()["payload"] == {"ok": 1}
    assert client.get("/api/jobs", headers=VIEWER).status_code == 200


def test_resurrect_edit_and_producer_pass_the_gate(app: ChokaQ, client: TestClient) -> None:
    dead = make_dead(app.storage, 1)[0]
    r = client.post(f"/api/dlq/{dead}/resurrect", headers=ADMIN, json={"payload_text": '"\\udfff"'})
    assert r.status_code == 422
    assert app.storage.get_job(dead).location is Location.DLQ  # type: ignore[union-attr]
    with pytest.raises(JobValidationError, match="nested"):
        app.enqueue("t", json.loads(nested(300)))
    with pytest.raises(JobValidationError):
        app.enqueue("t", {"s": "a\x00b"})


def test_cli_enqueue_refuses_nan_in_one_line(app: ChokaQ) -> None:
    r = CliRunner().invoke(cli, ["--db", app.settings.storage_url, "enqueue", "t", "--payload", '{"x": NaN}'])
    assert r.exit_code == 2 and r.output.startswith("error: invalid input: payload is not valid JSON")
    assert len(r.output.strip().splitlines()) == 1


STORED_BAD = ['"\\udfff"', nested(1500), '{"x": NaN}', "not json at all", '{"a": "\\u0000"}']


def test_a_stored_bad_row_never_breaks_reading(app: ChokaQ, client: TestClient) -> None:
    s = app.storage
    hot = [enqueue(s) for _ in STORED_BAD]
    dead = make_dead(s, len(STORED_BAD))
    done = make_archived(s, len(STORED_BAD))
    with s.engine.begin() as c:  # rows an older version (or a hand-written UPDATE) left behind
        for table, ids in ((jobs_hot, hot), (jobs_dlq, dead), (jobs_archive, done)):
            for job_id, text in zip(ids, STORED_BAD, strict=True):
                c.execute(update(table).where(table.c.Id == job_id).values(Payload=text))
    for path, params in (("/api/jobs", {}), ("/api/dlq", {}), ("/api/jobs", {"location": "archive"})):
        r = client.get(path, headers=VIEWER, params=params)
        assert r.status_code == 200, r.text[:300]
        items = r.json()["items"]
        assert len(items) == len(STORED_BAD) and all(i["payload_invalid"] for i in items)
        assert all(isinstance(i["payload"], str) and len(i["payload"]) <= 2001 for i in items)
    r = client.get(f"/api/dlq/{dead[1]}", headers=VIEWER)
    assert r.status_code == 200 and r.json()["payload_invalid"] and r.json()["payload"].endswith("…")
    assert "nested" in r.json()["payload_problem"]
    for job_id in (hot[0], done[0]):
        assert client.get(f"/api/jobs/{job_id}", headers=VIEWER).json()["payload_invalid"] is True
    # Still fixable and purgeable.
    r = client.patch(f"/api/dlq/{dead[0]}", headers=ADMIN, json={"payload": {"fixed": True}})
    assert r.status_code == 200 and r.json()["payload"] == {"fixed": True} and not r.json()["payload_invalid"]
    r = client.post("/api/dlq/purge", headers=ADMIN, json={"ids": dead[1:]})
    assert r.json()["affected"] == len(STORED_BAD) - 1
    # The CLI shows them too.
    runner = CliRunner()
    r = runner.invoke(cli, ["--db", app.settings.storage_url, "job", "show", hot[0]])
    assert r.exit_code == 0 and json.loads(r.output)["payload_invalid"] is True


def test_readable_preview_is_serialisable() -> None:
    value, problem = readable('"\\udfff' + "x" * 5000)
    assert problem is not None and isinstance(value, str) and value.endswith("…")
    json.dumps(value).encode("utf-8")
    assert readable('{"a": 1}') == ({"a": 1}, None)
