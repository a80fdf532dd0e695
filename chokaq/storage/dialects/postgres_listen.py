"""PostgreSQL LISTEN for new jobs, so idle workers start work without waiting for the next poll, and
for running jobs an operator cancelled, so their handlers stop at once (not at the next heartbeat)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sqlalchemy.engine import make_url

from chokaq.domain.backoff import backoff
from chokaq.storage.dialects.postgres import CANCEL_CHANNEL, EVENTS_CHANNEL, NOTIFY_CHANNEL

log = logging.getLogger("chokaq.notify")


def listen(
    url: str,
    on_notify: Callable[[], None],
    stop: threading.Event,
    listening: threading.Event,
    on_cancel: Callable[[str], None] | None = None,
    *,
    channel: str = NOTIFY_CHANNEL,
) -> None:
    """Block until ``stop``, calling ``on_notify`` for each new-work notification and ``on_cancel``
    with the payload of each cancel (see storage/cancel.py); ``listening`` is set while the LISTEN
    connection is up. Reconnects on errors; polling and heartbeats keep working meanwhile, so a
    lost listener only costs latency. ``channel``: what ``on_notify`` hears (new work; or the event
    feed's new rows, :func:`listen_events`)."""
    import psycopg  # lazy: the PostgreSQL driver is optional

    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    failures = 0
    while not stop.is_set():
        try:
            # Keepalives end a connection whose server vanished; LISTEN sends nothing otherwise.
            with psycopg.connect(
                dsn,
                autocommit=True,
                connect_timeout=10,
                keepalives=1,
                keepalives_idle=5,
                keepalives_interval=2,
                keepalives_count=3,
            ) as conn:
                conn.execute(f"LISTEN {channel}")
                if on_cancel is not None:
                    conn.execute(f"LISTEN {CANCEL_CHANNEL}")
                listening.set()
                failures = 0
                on_notify()  # anything enqueued while we were not listening
                while not stop.is_set():
                    for n in conn.notifies(timeout=0.5):
                        if n.channel == CANCEL_CHANNEL and on_cancel is not None:
                            on_cancel(n.payload)
                        else:
                            on_notify()
        except Exception as exc:
            listening.clear()
            # Capped backoff, one line per try: polling carries on meanwhile.
            delay = backoff(failures, base=0.5)
            failures += 1
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            log.warning("LISTEN connection lost (%s); reconnecting in %.1fs", reason, delay)
            stop.wait(delay)


def listen_events(url: str, on_event: Callable[[], None], stop: threading.Event, listening: threading.Event) -> None:
    """:func:`listen` for the event feed (storage/event_feed.py): ``on_event`` after each commit
    that wrote feed rows, in any process, and once on each (re)connect."""
    listen(url, on_event, stop, listening, channel=EVENTS_CHANNEL)
