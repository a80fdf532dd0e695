"""Shared helpers for the infrastructure tests.

The Bicep files are parsed with pycep-parser (a Lark grammar for Bicep). Nothing here compiles
or deploys them: there is no Bicep CLI and no Azure access on the build machines.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from pycep import BicepParser
from pycep.models import BicepElement

REPO_ROOT = Path(__file__).resolve().parents[2]
BICEP_DIR = REPO_ROOT / "infra" / "bicep"
MAIN_BICEP = BICEP_DIR / "main.bicep"
MODULES_DIR = BICEP_DIR / "modules"
PARAMETERS_JSON = BICEP_DIR / "main.parameters.json"
GRANT_SQL = BICEP_DIR / "sql" / "grant-app-identity.sql"
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"


@cache
def _parser() -> BicepParser:
    return BicepParser()


def all_bicep_files() -> list[Path]:
    return sorted(BICEP_DIR.rglob("*.bicep"))


@cache
def parse_bicep(path: Path) -> dict[str, Any]:
    """pycep's JSON form of one file: parameters, variables, resources, modules, outputs."""
    return _parser().parse(file_path=path)


@cache
def bicep_tree(path: Path) -> Any:
    """The raw Lark tree (keeps identifiers and quoted strings apart)."""
    return _parser().lark_parser.parse(path.read_text())


def is_ref(value: Any) -> bool:
    """True when pycep gave an identifier (a parameter, variable, resource...), not a literal."""
    return isinstance(value, BicepElement)


_INTERPOLATION = re.compile(r"\$\{([^}]*)\}")
_IDENT_IN_EXPR = re.compile(r"(?<![.\w'])([A-Za-z_]\w*)")


# Tree nodes whose first children declare or name something rather than read it: how many to skip.
_DECLARING = {
    "key": None,  # an object key: skip it all
    "data_type": None,  # a type name
    "loop_array": 1,  # children[0] declares the loop variable
    "loop_object": 1,
    "loop_array_index": 2,
}


def _token_uses(node: Any, used: set[str]) -> None:
    if node.type == "STRING":
        used.add(str(node))
    elif node.type == "QUOTED_INTERPOLATION":
        for expr in _INTERPOLATION.findall(str(node)):
            used.update(_IDENT_IN_EXPR.findall(expr))


def _walk_uses(node: Any, used: set[str]) -> None:
    from lark import Token, Tree

    if isinstance(node, Token):
        _token_uses(node, used)
        return
    if not isinstance(node, Tree):
        return
    if node.data in ("property_accessor", "nested_resource_accessor"):
        _walk_uses(node.children[0], used)  # the right side is a member name, not a reference
        return
    if node.data in _DECLARING and _DECLARING[node.data] is None:
        return
    for child in node.children[_DECLARING.get(node.data) or 0 :]:
        _walk_uses(child, used)


def identifier_uses(path: Path) -> set[str]:
    """Identifiers a file reads: every identifier token outside declarations, object keys,
    type names and member names (`x.member`), plus identifiers inside `${...}` interpolation."""
    from lark import Token, Tree

    used: set[str] = set()
    for element in bicep_tree(path).children:
        if not isinstance(element, Tree):
            continue
        # Skip the declared name of param/var/resource/module/output/type/func.
        skipped_name = False
        for child in element.children:
            if not skipped_name and isinstance(child, Token) and child.type == "STRING":
                skipped_name = True
                continue
            _walk_uses(child, used)
    return used


def resolve_param_default(parsed: dict[str, Any], value: Any) -> Any:
    """If value is a reference to a parameter of this file, return that parameter's default."""
    if is_ref(value) and value in parsed["parameters"]:
        return parsed["parameters"][value]["default"]
    return value


def resources_of_type(parsed: dict[str, Any], resource_type: str) -> list[dict[str, Any]]:
    return [
        r for r in parsed["resources"].values() if r["type"].lower() == resource_type.lower() and not r.get("existing")
    ]


def resource_config(resource: dict[str, Any]) -> dict[str, Any]:
    """The body of a resource, also when it is declared with a `for` loop."""
    config = resource["config"]
    if isinstance(config, dict) and "loop_type" in config:
        return config["config"]
    return config


def module_calls(parsed: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Module calls; a conditional one (`= if (...) {...}`) gets its body as `config` and its
    condition as `condition`, like an unconditional one."""
    calls: dict[str, dict[str, Any]] = {}
    for symbol, call in parsed.get("modules", {}).items():
        config = call["config"]
        if isinstance(config, dict) and "condition" in config and "config" in config:
            call = {**call, "config": config["config"], "condition": config["condition"]}
        calls[symbol] = call
    return calls


def module_by_path(relative: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the call in main.bicep, the parsed module file) for a module path such as 'modules/sql.bicep'."""
    main = parse_bicep(MAIN_BICEP)
    for call in module_calls(main).values():
        if call["detail"]["path"] == relative:
            return call, parse_bicep(BICEP_DIR / relative)
    raise AssertionError(f"main.bicep does not call {relative}")


def app_option_value(argv: list[str]) -> str:
    """The value given to --app in a chokaq command line (either `--app X` or `--app=X`)."""
    for i, arg in enumerate(argv):
        if arg == "--app":
            return argv[i + 1]
        if arg.startswith("--app="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"no --app in {argv}")


def parse_with_real_cli(argv: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Parse a `chokaq ...` command line with the real click CLI, without running anything.

    Returns (the chain of sub-command names, every parsed option value by parameter name).
    Raises click.UsageError on a bad line.
    """

    import click

    from chokaq.cli import main as cli_main

    group = next((v for v in vars(cli_main).values() if isinstance(v, click.Group)), None)
    assert group is not None, "no click group in chokaq.cli.main"
    assert argv[0] == "chokaq", argv
    names: list[str] = []
    values: dict[str, Any] = {}
    command: Any = group
    ctx = command.make_context("chokaq", list(argv[1:]), resilient_parsing=False)
    values.update(ctx.params)
    while isinstance(command, click.Group):
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        if not rest:
            break
        name, command, rest = command.resolve_command(ctx, rest)
        names.append(name)
        ctx = command.make_context(name, rest, parent=ctx)
        values.update(ctx.params)
    return names, values
