"""The README stays a five-minute read whose links work, and the docs site has no page outside its nav.

`make docs` (mkdocs build --strict) checks the links between docs pages; these checks need no
MkDocs, so they run with the rest of the suite and name the file at fault.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

# [text](target) and ![alt](target), not inside inline code; the target up to a space or ")".
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _nav_pages(node: Any) -> list[str]:
    """Every page file named in mkdocs.yml's nav, however deeply nested."""
    if isinstance(node, str):
        return [] if re.match(r"^[a-z]+://", node) else [node]
    if isinstance(node, list):
        return [page for item in node for page in _nav_pages(item)]
    if isinstance(node, dict):
        return [page for value in node.values() for page in _nav_pages(value)]
    return []


def _mkdocs_config() -> dict[str, Any]:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert isinstance(config, dict)
    return config


def _relative_links(text: str) -> list[str]:
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold no links
    return [t for t in LINK.findall(text) if not re.match(r"^([a-z]+:|#)", t)]


def test_readme_is_under_200_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 200, f"README.md has {len(lines)} lines: move detail into docs/, keep it a five-minute read"


def test_readme_keeps_what_a_newcomer_needs() -> None:
    text = README.read_text(encoding="utf-8")
    assert "make dev" in text
    assert "make test" in text  # CI's test command, and the README's
    assert "at most 2 \u00d7 Concurrency" in text  # the delivery bound a crash leaves
    assert "docs/verification.md" in text


def test_every_relative_link_in_the_readme_exists() -> None:
    links = _relative_links(README.read_text(encoding="utf-8"))
    assert links, "the README links into docs/"
    missing = [t for t in links if not (ROOT / t.split("#", 1)[0]).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_every_docs_page_is_in_the_nav_and_every_nav_page_exists() -> None:
    config = _mkdocs_config()
    assert config.get("docs_dir", "docs") == "docs"
    nav = _nav_pages(config["nav"])
    on_disk = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(set(on_disk) - set(nav)) == [], "docs pages missing from mkdocs.yml's nav"
    assert sorted(set(nav) - set(on_disk)) == [], "mkdocs.yml's nav names pages that do not exist"


def test_the_site_build_fails_on_a_page_outside_the_nav() -> None:
    """--strict fails on warnings; these make an omitted page, a bad link or an absolute link one."""
    validation = _mkdocs_config()["validation"]
    assert validation["omitted_files"] == "warn"
    assert validation["absolute_links"] == "warn"
    assert validation["unrecognized_links"] == "warn"
    assert _mkdocs_config()["theme"]["font"] is False  # no Google Fonts: nothing from a CDN
