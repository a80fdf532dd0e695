"""The doorbell's Azure Storage queue side: the producer's sender, and the message format.

After an enqueue commits, the producer puts one small message on the queue named by
``Functions.DoorbellQueue`` (``CHOKAQ_FUNCTIONS__DOORBELL_QUEUE``): ``{"queue": "<chokaq queue>",
"at": <unix time of the commit>}``. The ``wake`` function (functions/wake.py) is triggered by it and
runs a short drain. Coalescing and best effort come from :class:`chokaq.runtime.doorbell.Doorbell`.

The connection follows the Functions convention for the trigger's ``connection`` name
``ChokaqDoorbell``, so producer and trigger read the same app settings:

* ``ChokaqDoorbell``: a connection string (local: ``UseDevelopmentStorage=true`` for Azurite), or
* ``ChokaqDoorbell__queueServiceUri`` (``https://<account>.queue.core.windows.net``) with
  ``ChokaqDoorbell__credential=managedidentity`` and, for a user-assigned identity,
  ``ChokaqDoorbell__clientId``: an identity-based connection, no key anywhere.

Producers outside the Functions app (a web app, the container worker) install it the same way::

    from functions.doorbell import install
    install(app)  # no-op unless CHOKAQ_FUNCTIONS__DOORBELL_QUEUE is set
"""

from __future__ import annotations

import json
import logging
import os
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from azure.storage.queue import LinearRetry, QueueClient, TextBase64DecodePolicy, TextBase64EncodePolicy

from chokaq.domain.errors import ConfigurationError
from chokaq.runtime.app import ChokaQ
from chokaq.runtime.doorbell import ANY_QUEUE, Doorbell

log = logging.getLogger("chokaq.functions.doorbell")
# The SDK's HTTP logging policy writes every request and response (URL, headers) at INFO: a dozen
# lines per ring, billed as traces on Azure. The doorbell's clients log through this logger instead,
# at WARNING unless an operator lowers it; other Azure clients in the process keep their own.
http_log = logging.getLogger("chokaq.functions.doorbell.http")
http_log.setLevel(logging.WARNING)

CONNECTION = "ChokaqDoorbell"
QUEUE_SETTING = "CHOKAQ_FUNCTIONS__DOORBELL_QUEUE"


def connection_string(environ: Mapping[str, str]) -> str | None:
    """``ChokaqDoorbell`` as a connection string (the SDK understands ``UseDevelopmentStorage=true``)."""
    return (environ.get(CONNECTION) or "").strip() or None


def queue_client(queue_name: str, environ: Mapping[str, str] = os.environ) -> QueueClient:
    """A QueueClient for the doorbell queue from the ``ChokaqDoorbell`` connection settings.

    Base64 text messages: the Functions queue trigger decodes base64 by default. One quick retry:
    a ring is a hint, and the ringer thread should not sit in the SDK's minute-long back-off."""
    options: dict[str, Any] = {
        "message_encode_policy": TextBase64EncodePolicy(),
        "message_decode_policy": TextBase64DecodePolicy(),
        "retry_policy": LinearRetry(backoff=1, random_jitter_range=0, retry_total=1),
        "connection_timeout": 5,
        "read_timeout": 10,
        "logger": http_log,
    }
    conn = connection_string(environ)
    if conn:
        return QueueClient.from_connection_string(conn, queue_name, **options)
    uri = (environ.get(f"{CONNECTION}__queueServiceUri") or "").strip()
    if not uri:
        account = (environ.get(f"{CONNECTION}__accountName") or "").strip()
        uri = f"https://{account}.queue.core.windows.net" if account else ""
    if not uri:
        raise ConfigurationError(
            f"{QUEUE_SETTING} is set but the doorbell has no connection: set {CONNECTION} (a connection "
            f"string) or {CONNECTION}__queueServiceUri with {CONNECTION}__credential=managedidentity"
        )
    from azure.identity import DefaultAzureCredential, ManagedIdentityCredential

    credential: Any
    if (environ.get(f"{CONNECTION}__credential") or "").strip().lower() == "managedidentity":
        client_id = (environ.get(f"{CONNECTION}__clientId") or "").strip() or None
        credential = ManagedIdentityCredential(client_id=client_id)
    else:
        credential = DefaultAzureCredential()
    return QueueClient(uri, queue_name, credential=credential, **options)


def message(queue: str, at: float | None = None) -> str:
    return json.dumps({"queue": queue, "at": round(time.time() if at is None else at, 3)})


@dataclass(frozen=True)
class Ring:
    queue: str  # the chokaq queue with work due, or "*"
    at: float | None  # when the producer rang (unix seconds), if the message says
    understood: bool


def parse(body: str) -> Ring:
    """Read a doorbell message. Never raises: whatever arrives, a ring means "look now"."""
    try:
        doc = json.loads(body)
        queue = doc["queue"]
        at = doc.get("at")
        if not isinstance(queue, str) or not queue:
            raise ValueError("queue")
        return Ring(queue, float(at) if isinstance(at, int | float) else None, True)
    except (ValueError, KeyError, TypeError, AttributeError):
        return Ring(ANY_QUEUE, None, False)


class AzureQueueSender:
    """The ``send`` of a Doorbell: one message, visible after ``delay`` seconds."""

    def __init__(self, client: QueueClient) -> None:
        self.client = client
        self._created = False

    def __call__(self, queue: str, delay: float) -> None:
        visibility = int(delay + 0.999) if delay > 0 else None
        try:
            self.client.send_message(message(queue), visibility_timeout=visibility)
        except Exception as exc:
            # The queue is made by the Bicep; locally the first ring makes it (needs Contributor).
            if self._created or getattr(exc, "error_code", None) != "QueueNotFound":
                raise
            self._created = True
            self.client.create_queue()
            self.client.send_message(message(queue), visibility_timeout=visibility)


_installed: weakref.WeakKeyDictionary[ChokaQ, Doorbell] = weakref.WeakKeyDictionary()


def installed(app: ChokaQ) -> Doorbell | None:
    return _installed.get(app)


def install(app: ChokaQ, environ: Mapping[str, str] = os.environ) -> Doorbell | None:
    """Ring the doorbell after every enqueue this app's storage commits, when the setting is on.
    Once per app: building the Functions app twice must not ring twice."""
    queue_name = app.settings.functions.doorbell_queue
    if not queue_name:
        return None
    if app in _installed:
        return _installed[app]
    bell = Doorbell(
        AzureQueueSender(queue_client(queue_name, environ)), interval=app.settings.functions.doorbell_interval
    )
    app.storage.add_announcer(bell)
    _installed[app] = bell
    log.info(
        "doorbell on: enqueues ring Azure Storage queue %r (at most once per %gs per chokaq queue)",
        queue_name,
        bell.interval,
    )
    return bell
