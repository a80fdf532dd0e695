"""The command line is whole as soon as ``cli`` is imported: no subcommand depends on an import
made for its side effect."""

from __future__ import annotations

import subprocess
import sys

EVERY_SUBCOMMAND = {
    "archive",
    "breakers",
    "db",
    "dev",
    "dlq",
    "enqueue",
    "health",
    "job",
    "schedules",
    "retention",
    "serve",
    "stats",
    "sweep",
    "worker",
    "workers",
}


def test_importing_cli_lists_every_subcommand() -> None:
    # A fresh interpreter: in this one another test may already have imported the command modules.
    code = "from chokaq.cli.main import cli; print(' '.join(sorted(cli.commands)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert set(out.split()) == EVERY_SUBCOMMAND


def test_running_the_module_offers_the_operator_commands() -> None:
    # ``python -m chokaq.cli.main`` runs the module as __main__, a second copy beside
    # chokaq.cli.main: commands registered on the other copy's group would be missing here.
    for sub in ("serve", "dlq", "archive", "dev"):
        done = subprocess.run([sys.executable, "-m", "chokaq.cli.main", sub, "--help"], capture_output=True, text=True)
        assert done.returncode == 0, (sub, done.stderr)
        assert "Usage: " in done.stdout
