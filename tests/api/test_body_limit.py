"""The request body limit: checked on the declared length, counted while the body streams in, and
never paid for by an anonymous caller (authentication comes before the body is read)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from chokaq.domain import limits
from tests.api.helpers import ADMIN_TOKEN, HEADERS
from tests.api.live_server import LiveServer, raw_request, rss_kib

ADMIN = HEADERS["admin"]
MB = 1024 * 1024


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path / "limits.db")
    try:
        yield server
    finally:
        server.stop()


def test_declared_length_over_the_limit_is_413_for_everyone(client: TestClient) -> None:
    big = b'{"type": "t", "payload": "' + b"x" * (limits.MAX_REQUEST_BYTES + 10) + b'"}'
    for headers in (ADMIN, {}):
        r = client.post("/api/jobs", headers={**headers, "Content-Type": "application/json"}, content=big)
        assert r.status_code == 413, r.text
        assert r.json()["error"] == "too_large" and str(limits.MAX_REQUEST_BYTES) in r.json()["detail"]


def test_the_public_health_check_reads_no_body(client: TestClient) -> None:
    """Anonymous callers may reach /api/health, so it must not buffer a body for them."""
    assert client.get("/api/health").status_code == 200
    for body in (b"x" * 1000, iter([b"x" * 1000])):  # declared length, then chunked
        r = client.request("GET", "/api/health", content=body)
        assert r.status_code == 413, r.text
        assert r.json()["error"] == "too_large"


def test_chunked_body_is_counted_while_it_streams(client: TestClient) -> None:
    def body() -> Iterator[bytes]:
        yield b'{"type": "t", "payload": "'
        for _ in range(limits.MAX_REQUEST_BYTES // (64 * 1024) + 2):
            yield b"x" * 64 * 1024
        yield b'"}'

    r = client.post("/api/jobs", headers={**ADMIN, "Content-Type": "application/json"}, content=body())
    assert r.status_code == 413 and r.json()["error"] == "too_large"
    # Anonymous: refused before a byte of the body is read.
    r = client.post("/api/jobs", headers={"Content-Type": "application/json", "X-ChokaQ-Request": "1"}, content=body())
    assert r.status_code == 401 and r.json()["error"] == "unauthenticated"


def test_a_body_just_under_the_limit_is_parsed(client: TestClient) -> None:
    # 1 MB of payload, sent as payload_text with every character escaped twice over: still in.
    payload = '["' + '\\"' * ((limits.MAX_PAYLOAD_BYTES - 4) // 2) + '"]'
    assert len(payload) <= limits.MAX_PAYLOAD_BYTES
    r = client.post("/api/jobs", headers=ADMIN, json={"type": "t", "payload": {"s": "y" * 900_000}})
    assert r.status_code == 201, r.text[:300]
    job = r.json()["id"]
    r = client.patch(f"/api/jobs/{job}", headers=ADMIN, json={"payload_text": payload})
    assert r.status_code == 200, r.text[:300]


def test_anonymous_caller_is_refused_before_sending_any_body(live: LiveServer) -> None:
    # Headers only: a server that read (or waited for) the body first would never answer.
    head = (
        "POST /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "X-ChokaQ-Request: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    assert raw_request(live.port, head, timeout=10) == 401
    head = (
        f"POST /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {ADMIN_TOKEN}\r\nContent-Length: {50 * MB}\r\n\r\n"
    )
    assert raw_request(live.port, head, timeout=10) == 413


def test_twenty_concurrent_anonymous_50_mb_bodies_stay_out_of_memory(live: LiveServer) -> None:
    before = rss_kib(live.pid)
    statuses: list[int] = []
    errors: list[BaseException] = []
    head = (
        f"POST /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {50 * MB}\r\n\r\n"
    )

    def one() -> None:
        try:
            statuses.append(raw_request(live.port, head, body_size=50 * MB))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert statuses == [413] * len(threads)
    growth_mb = (rss_kib(live.pid) - before) / 1024
    assert growth_mb < 50, f"server RSS grew by {growth_mb:.1f} MB"
