"""Finding the user's app object from ``pkg.module:attribute``: the CLI and the Functions host share it."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from chokaq.domain.errors import ConfigurationError
from chokaq.runtime.app import ChokaQ


def load_app(spec: str | None, *, db: str | None = None) -> ChokaQ:
    """Import the app named by ``spec`` (or ``CHOKAQ_APP``); without one, a bare app."""
    spec = spec or os.environ.get("CHOKAQ_APP")
    if not spec:
        return ChokaQ(storage_url=db) if db else ChokaQ()
    module_name, _, attr = spec.partition(":")
    attr = attr or "app"
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigurationError(f"cannot import {module_name!r} for --app {spec!r}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ConfigurationError(f"{module_name!r} has no attribute {attr!r} (from --app {spec!r})")
    if callable(obj) and not isinstance(obj, ChokaQ):
        obj = obj()
    if not isinstance(obj, ChokaQ):
        raise ConfigurationError(f"--app {spec!r} is a {type(obj).__name__}, not a ChokaQ app")
    if db:
        obj.close()
        obj.settings.storage_url = db
    return obj
