"""Live-event streams: one shared stats poll, caps per principal and per process, and a maximum
lifetime after which the client must come back and be authorised again."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from chokaq import ChokaQ
from chokaq.api import create_api
from tests.api.helpers import ADMIN_TOKEN, HEADERS, VIEWER_TOKEN, make_app
from tests.api.live_server import ThreadServer

VIEWER, ADMIN, OPS = HEADERS["viewer"], HEADERS["admin"], HEADERS["operator"]


@pytest.fixture
def served(sqlite_url: str) -> Iterator[tuple[ChokaQ, Any, ThreadServer]]:
    app = make_app(
        sqlite_url,
        admin={
            "event_poll_interval": 0.1,
            "max_event_streams": 4,
            "max_event_streams_per_principal": 3,
            "event_stream_max_seconds": 600,
        },
    )
    api = create_api(app)
    server = ThreadServer(api)
    try:
        yield app, api, server
    finally:
        server.stop()
        app.close()


def _stats_messages(client: httpx.Client, url: str, headers: dict[str, str], n: int) -> int:
    """Read one stream until ``n`` stats ticks arrived; return how many it got."""
    got = 0
    with client.stream("GET", url + "/api/events", headers=headers) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and json.loads(line[6:])["kind"] == "stats.updated":
                got += 1
                if got >= n:
                    break
    return got


def test_streams_share_one_stats_poll(served: tuple[ChokaQ, Any, ThreadServer]) -> None:
    _app, api, server = served
    calls = {"n": 0}
    real = api.state.figures.read

    def counting() -> Any:
        calls["n"] += 1
        return real()

    api.state.figures.read = counting  # a spy on the real figures read
    received: list[int] = []
    tokens = [VIEWER, ADMIN, OPS, VIEWER]
    with httpx.Client(timeout=30) as client:
        threads = [
            threading.Thread(target=lambda h=h: received.append(_stats_messages(client, server.url, h, 10)))
            for h in tokens
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert received == [10] * 4
    # Per-stream polling would have run at least one query per tick per stream (40).
    assert calls["n"] < sum(received), (calls["n"], received)
    assert api.state.stream_hub.polls == calls["n"]


def test_stream_caps_answer_429(served: tuple[ChokaQ, Any, ThreadServer]) -> None:
    _, _api, server = served
    with httpx.Client(timeout=30) as client:
        opened = []
        try:
            for _ in range(3):
                r = client.send(client.build_request("GET", server.url + "/api/events", headers=VIEWER), stream=True)
                assert r.status_code == 200
                opened.append(r)
            r = client.send(client.build_request("GET", server.url + "/api/events", headers=VIEWER), stream=True)
            opened.append(r)
            assert r.status_code == 429
            body = json.loads(r.read())
            assert body["error"] == "too_many_requests"
            assert "3 event streams" in body["detail"] and r.headers["retry-after"]
            r4 = client.send(client.build_request("GET", server.url + "/api/events", headers=ADMIN), stream=True)
            assert r4.status_code == 200  # another principal may still open one...
            opened.append(r4)
            r = client.send(client.build_request("GET", server.url + "/api/events", headers=OPS), stream=True)
            opened.append(r)
            assert r.status_code == 429 and "4 event streams" in json.loads(r.read())["detail"]  # ...up to the cap
        finally:
            for r in opened:
                r.close()
    # Closed streams give their slots back.
    with httpx.Client(timeout=30) as client:
        assert _stats_messages(client, server.url, VIEWER, 1) == 1


def test_a_stream_ends_at_its_lifetime_and_a_revoked_token_cannot_reconnect(sqlite_url: str) -> None:
    app = make_app(sqlite_url, admin={"event_poll_interval": 0.1, "event_stream_max_seconds": 1})
    api = create_api(app)
    server = ThreadServer(api)
    try:
        with httpx.Client(timeout=30) as client:
            lines = []
            with client.stream("GET", server.url + "/api/events", headers=VIEWER) as r:
                assert r.status_code == 200
                for line in r.iter_lines():  # ends by itself after about 10 ticks
                    lines.append(line)
                    if len(lines) > 400:
                        break  # a stream without a lifetime: fail below instead of hanging
            assert lines[0].startswith("retry: ")
            assert any(line.startswith(": stream lifetime reached") for line in lines)
            # The viewer's token is revoked; the reconnect is authorised afresh and refused.
            auth = api.state.authenticator
            auth.tokens = [t for t in auth.tokens if t.key != VIEWER_TOKEN]
            assert client.get(server.url + "/api/events", headers=VIEWER).status_code == 401
            assert (
                client.get(
                    server.url + "/api/events",
                    headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                    params={"max_events": 1},
                ).status_code
                == 200
            )
    finally:
        server.stop()
        app.close()
