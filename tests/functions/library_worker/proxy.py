"""The worker side of the test: Microsoft's Python language worker library, driven as its proxy does.

Runs in a Python 3.13 venv with ``azure-functions-runtime`` and the app's ``requirements.txt``. On
Azure the Functions host starts a small gRPC proxy that ships inside the host (it is not on PyPI);
the proxy turns each StreamingMessage into a call of the library's handlers and every logging record
into an RpcLog. This stand-in does the same over a pipe: one JSON request per stdin line, one JSON
answer per line on the original stdout (the app's own prints go to stderr). Requests and responses
pass through the protobuf wire format on the way, as they would over the gRPC stream. Logging is set up as the
proxy sets it up: the root logger at INFO (DEBUG with PYTHON_ENABLE_DEBUG_LOGGING), one handler that
forwards every record with its level, logger name and invocation id.

Usage: python proxy.py <dir with messages_pb2.py>
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import sys
import threading
import traceback
import uuid
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, sys.argv[1])
protos: Any = importlib.import_module("messages_pb2")
from google.protobuf.json_format import MessageToDict  # noqa: E402

_channel = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)  # print() from the app lands on stderr, which the test reads too
_lock = threading.Lock()


def send(doc: dict[str, Any]) -> None:
    with _lock:
        _channel.write(json.dumps(doc) + "\n")


import azure_functions_runtime as library  # noqa: E402


def current_invocation() -> str | None:
    try:
        return library.invocation_id_cv.get()
    except LookupError:
        return None


class RpcLogHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
        except Exception:  # a record that cannot format is still a line the host would show
            message = repr(record.msg)
        send(
            {
                "log": {
                    "level": record.levelname,
                    "category": record.name,
                    "message": message,
                    "invocation_id": current_invocation(),
                    "thread": threading.current_thread().name,
                }
            }
        )


root = logging.getLogger()
root.setLevel(logging.DEBUG if os.environ.get("PYTHON_ENABLE_DEBUG_LOGGING", "").lower() == "true" else logging.INFO)
root.addHandler(RpcLogHandler())

metadata: dict[str, Any] = {}  # function name -> RpcFunctionMetadata


def wire(message: Any) -> Any:
    """The message as the other side of the stream would get it: serialized and parsed again."""
    return type(message).FromString(message.SerializeToString())


def wrap(**content: Any) -> SimpleNamespace:
    return SimpleNamespace(
        request=wire(protos.StreamingMessage(request_id=str(uuid.uuid4()), **content)),
        properties={"host": "127.0.0.1", "protos": protos},
    )


def trigger(name: str, binding_type: str) -> str:
    for binding_name, info in metadata[name].bindings.items():
        if info.type == binding_type:
            return str(binding_name)
    raise KeyError(f"{name} has no {binding_type} binding")


def http_data(req: dict[str, Any]) -> Any:
    body = req.get("body", "").encode()
    return protos.TypedData(
        http=protos.RpcHttp(
            method=req["method"],
            url=req["url"],
            headers=req.get("headers", {}),
            query=req.get("query", {}),
            body=protos.TypedData(bytes=body),
            rawBody=protos.TypedData(bytes=body),
        )
    )


def invocation(req: dict[str, Any]) -> Any:
    name = req["function"]
    kind = req["kind"]
    trigger_metadata: dict[str, Any] = {}
    if kind == "http":
        binding, data = trigger(name, "httpTrigger"), http_data(req)
    elif kind == "queue":
        binding, data = trigger(name, "queueTrigger"), protos.TypedData(string=req["body"])
        trigger_metadata = {
            "Id": protos.TypedData(string=str(uuid.uuid4())),
            "DequeueCount": protos.TypedData(json="1"),
            "PopReceipt": protos.TypedData(string="receipt"),
        }
    else:
        binding = trigger(name, "timerTrigger")
        data = protos.TypedData(json=json.dumps({"Schedule": {}, "IsPastDue": False}))
    return protos.InvocationRequest(
        invocation_id=req.get("invocation_id") or str(uuid.uuid4()),
        function_id=metadata[name].function_id,
        input_data=[protos.ParameterBinding(name=binding, data=data)],
        trigger_metadata=trigger_metadata,
    )


async def handle(req: dict[str, Any]) -> Any:
    op = req["op"]
    if op == "init":
        sys.path.insert(0, req["directory"])  # the proxy puts the app's directory first, then loads the library
        response = await library.worker_init_request(
            wrap(
                worker_init_request=protos.WorkerInitRequest(
                    host_version="4.0.0-test", function_app_directory=req["directory"]
                )
            )
        )
        library.start_threadpool_executor()
        return response
    if op == "metadata":
        response = await library.functions_metadata_request(
            wrap(functions_metadata_request=protos.FunctionsMetadataRequest(function_app_directory=req["directory"]))
        )
        metadata.update({m.name: m for m in response.function_metadata_results})
        return response
    if op == "load":
        m = metadata[req["function"]]
        return await library.function_load_request(
            wrap(function_load_request=protos.FunctionLoadRequest(function_id=m.function_id, metadata=m))
        )
    if op == "invoke":
        return await library.invocation_request(wrap(invocation_request=invocation(req)))
    raise ValueError(f"unknown op {op!r}")


async def main() -> None:
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        req = json.loads(line)
        try:
            response = wire(await handle(req))
            send({"response": MessageToDict(response, preserving_proto_field_name=True)})
        except Exception:
            send({"crash": traceback.format_exc()})
    library.stop_threadpool_executor()


asyncio.run(main())
