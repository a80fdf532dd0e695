"""The Storage and AdminStore operations a test function calls, read from its source.

The SQL Server arm of the conformance suite is held to the contract with these: every operation a
contract case calls, and every optional argument it passes, must have a driver-level capture
whose test makes that call too. A call counts when its receiver is a Storage (a name in
:data:`STORAGE_NAMES`, or ``something.storage``) or an AdminStore (``AdminStore(...)``, ``admin``)
and the method is a public method of that class. A test function's calls include those of the
functions of its own module it calls by name (the contract's ``enqueue`` and ``claim`` helpers).
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chokaq.storage import Storage
from chokaq.storage.admin import AdminStore

ROOT = Path(__file__).resolve().parents[2]
STORAGE_NAMES = {"storage", "s", "mssql"}
ADMIN_NAMES = {"admin"}
# What a case does that its arguments do not show: a request with a key, a claim of a queue with
# MaxWorkers (one given MaxWorkers, or pinned as such in the queue cache, then a claim in one case).
KEYED = "idempotency_key"
LIMITED = "MaxWorkers queue"


@dataclass(frozen=True, order=True)
class Use:
    """One contract operation: a method, or a method with one optional argument or path."""

    operation: str  # "fetch", "AdminStore.resurrect"
    argument: str = ""  # "start", "queue_names", KEYED, LIMITED, ...

    def __str__(self) -> str:
        return f"{self.operation}({self.argument})" if self.argument else self.operation


def _owner(receiver: ast.expr) -> type | None:
    if isinstance(receiver, ast.Name):
        return Storage if receiver.id in STORAGE_NAMES else AdminStore if receiver.id in ADMIN_NAMES else None
    if isinstance(receiver, ast.Attribute) and receiver.attr == "storage":
        return Storage
    if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "AdminStore":
        return AdminStore
    return None


def _optional_arguments(owner: type, name: str, call: ast.Call) -> list[str]:
    """The parameters with defaults that ``call`` passes, by name."""
    signature = inspect.signature(getattr(owner, name))
    params = list(signature.parameters.values())
    if not isinstance(inspect.getattr_static(owner, name), staticmethod):
        params = params[1:]  # self
    given = [p.name for p in params[: len(call.args)]] + [k.arg for k in call.keywords if k.arg]
    return [n for n in given if signature.parameters[n].default is not inspect.Parameter.empty]


def _direct_uses(node: ast.AST) -> set[Use]:
    found: set[Use] = set()
    keyed = limited = False
    for n in ast.walk(node):
        if not isinstance(n, ast.Call):
            continue
        if isinstance(n.func, ast.Name) and n.func.id == "EnqueueRequest":
            keyed |= any(k.arg == KEYED for k in n.keywords)
        if not isinstance(n.func, ast.Attribute) or n.func.attr.startswith("_"):
            continue
        if n.func.attr == "pin_limited" and n.args and isinstance(n.args[0], ast.List):
            limited |= bool(n.args[0].elts)
        owner = _owner(n.func.value)
        if owner is None or not inspect.isfunction(getattr(owner, n.func.attr, None)):
            continue
        op = n.func.attr if owner is Storage else f"{owner.__name__}.{n.func.attr}"
        found.add(Use(op))
        found.update(Use(op, a) for a in _optional_arguments(owner, n.func.attr, n))
    if keyed:
        found.update(
            Use(u.operation, KEYED) for u in list(found) if u.operation in ("enqueue", "enqueue_many", "enqueue_all")
        )
    if (limited or Use("update_queue", "max_workers") in found) and Use("fetch") in found:
        found.add(Use("fetch", LIMITED))
    return found


class Module:
    """A test module's functions, parsed once."""

    def __init__(self, path: str) -> None:
        self.path = path
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        self.functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}

    def _reached(self, name: str) -> list[ast.FunctionDef]:
        """The function and the functions of this module it calls by name, transitively."""
        seen: dict[str, ast.FunctionDef] = {}
        todo = [name]
        while todo:
            current = todo.pop()
            if current in seen or current not in self.functions:
                continue
            seen[current] = self.functions[current]
            todo += [
                n.func.id for n in ast.walk(seen[current]) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            ]
        return list(seen.values())

    def uses(self, name: str) -> set[Use]:
        """What test function ``name`` calls, with the helpers it calls (KeyError: no such function)."""
        if name not in self.functions:
            raise KeyError(f"{self.path} has no function {name}")
        # One tree for the case and its helpers: a key or MaxWorkers queue set in one, used in another, counts.
        return _direct_uses(ast.Module(body=list(self._reached(name)), type_ignores=[]))

    def cases_taking(self, fixtures: Iterable[str]) -> list[str]:
        """The test functions that take one of ``fixtures`` (the per-profile cases)."""
        wanted = set(fixtures)
        return [
            name
            for name, fn in self.functions.items()
            if name.startswith("test_") and wanted & {a.arg for a in fn.args.args}
        ]


def uses_of(reference: str, modules: dict[str, Any] | None = None) -> set[Use]:
    """The uses of the test ``path::function``."""
    path, name = reference.split("::")
    cache = modules if modules is not None else {}
    if path not in cache:
        cache[path] = Module(path)
    result: set[Use] = cache[path].uses(name)
    return result
