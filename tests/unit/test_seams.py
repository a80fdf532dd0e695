"""The module seams: which room may import which (issue 16, item 4)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _runtime_imports(path: Path) -> set[str]:
    """Modules ``path`` imports when it runs: every import except those under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only: set[int] = set()
    for node in ast.walk(tree):
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
