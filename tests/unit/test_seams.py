"""The module seams: which room may import which (issue 16, item 4)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _runtime_imports(path: Path, *, typing_too: bool = False) -> set[str]:
    """Modules ``path`` imports when it runs: every import except those under ``if TYPE_CHECKING:``
    (``typing_too``: those as well)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if typing_too:
            break
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            typing_only.update(id(n) for child in node.body for n in ast.walk(child))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_worker_does_not_import_the_app() -> None:
    # Handler and JobContext live in runtime.handlers: the app imports the worker, never the reverse.
    imports = _runtime_imports(ROOT / "chokaq/runtime/worker.py")
    assert "chokaq.runtime.handlers" in imports
    assert not {m for m in imports if m.startswith("chokaq.runtime.app")}


def test_functions_do_not_import_the_cli() -> None:
    for path in [*sorted((ROOT / "functions").glob("*.py")), ROOT / "function_app.py"]:
        cli = {m for m in _runtime_imports(path) if m.startswith("chokaq.cli")}
        assert not cli, f"{path.name} imports {cli}"


def test_job_context_and_handler_keep_their_public_names() -> None:
    import chokaq
    from chokaq.runtime import app, handlers

    assert chokaq.JobContext is handlers.JobContext is app.JobContext
    assert app.Handler is handlers.Handler


def _publish_calls(path: Path) -> list[int]:
    """Lines of ``path`` that call something's ``.publish(...)``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "publish"
    ]


def test_surfaces_leave_operator_events_to_the_operations_service() -> None:
    # Operator events used to be published by hand in 12 places with free-form kinds; the API, the
    # CLI and the Functions now call chokaq.operations, which publishes typed kinds on the app's bus.
    surfaces = [
        *sorted((ROOT / "chokaq/api").glob("*.py")),
        *sorted((ROOT / "chokaq/cli").glob("*.py")),
        *sorted((ROOT / "functions").glob("*.py")),
    ]
    by_hand = {str(p.relative_to(ROOT)): lines for p in surfaces if (lines := _publish_calls(p))}
    assert by_hand == {}
    assert _publish_calls(ROOT / "chokaq/operations/service.py")


def test_there_is_no_process_wide_event_bus() -> None:
    # Each ChokaQ app owns its bus (app.bus): a module-level one was shared by every app in a process.
    from chokaq.runtime import events
    from chokaq.runtime.app import ChokaQ

    assert not [name for name, value in vars(events).items() if isinstance(value, events.EventBus)]
    assert ChokaQ().bus is not ChokaQ().bus


def test_the_cli_prints_the_public_job_shape_without_loading_fastapi() -> None:
    code = (
        "import sys, chokaq.cli.main, chokaq.operations.job_out, chokaq.operations.service; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette')))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def _sources() -> list[Path]:
    """Every Python module of chokaq and of the Functions, and function_app.py."""
    return [
        *sorted((ROOT / "chokaq").rglob("*.py")),
        *sorted((ROOT / "functions").rglob("*.py")),
        ROOT / "function_app.py",
    ]


def test_nothing_outside_storage_imports_a_storage_module() -> None:
    # chokaq.storage is the one front door: its __init__ exports what the runtime and the surfaces
    # use. Imports under TYPE_CHECKING count too: an annotation also reaches past the door.
    storage = ROOT / "chokaq/storage"
    inside = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts[:3])
        for p in storage.rglob("*.py")
        if p.relative_to(storage).parts != ("__init__.py",)
    }
    assert {"chokaq.storage.store", "chokaq.storage.statements", "chokaq.storage.admin"} <= inside

    def inner(module: str) -> bool:
        return ".".join(module.split(".")[:3]) in inside

    reaching = {
        str(path.relative_to(ROOT)): sorted(found)
        for path in _sources()
        if not path.is_relative_to(storage)
        if (found := {m for m in _runtime_imports(path, typing_too=True) if inner(m)})
    }
    assert reaching == {}


def test_storage_does_not_import_the_runtime() -> None:
    # The runtime holds the storage, never the reverse (backoff, which both use, is in chokaq.domain).
    # Only imports that run count: one under TYPE_CHECKING, for an annotation, is exempt.
    importing = {
        str(path.relative_to(ROOT)): sorted(found)
        for path in sorted((ROOT / "chokaq/storage").rglob("*.py"))
        if (found := {m for m in _runtime_imports(path) if m.split(".")[:2] == ["chokaq", "runtime"]})
    }
    assert importing == {}
