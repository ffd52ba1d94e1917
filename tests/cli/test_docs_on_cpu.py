"""The README and the docs pages as a new user follows them: every relative link (and its #anchor) resolves, and
every command they show (``python -m MODULE [SUBCOMMAND] --flag ...``, ``python bench/NAME.py --flag ...``) is one
of ours with a ``parser()`` that knows each flag. A renamed flag or a moved heading fails here, not in a user's
terminal. Each docs page is a task page: it opens with the command that shows its subject and stays short, its
reference material in ``docs/appendix``."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
PAGE_BYTES = 15 * 1024
OPENING_COMMAND = re.compile(r"`(?:make |python3? |pytest |PYTHONPATH=\S+ \S*python )[^`]+`")
COMMAND = re.compile(r"python3? (?:-m ((?:data_gen|tool_server|verl_ext)[\w.]*)|(bench/\w+\.py))((?:[ \t]+[^\s`|]+)*)")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _links() -> list[tuple[Path, int, str]]:
    return [(page, n, m.group(1)) for page in PAGES for n, line in enumerate(page.read_text().splitlines(), 1)
            for m in LINK.finditer(line) if not m.group(1).startswith(("http://", "https://", "mailto:"))]


def _commands() -> list[tuple[Path, int, str, list[str]]]:
    return [(page, n, m.group(1) or m.group(2), m.group(3).split())
            for page in PAGES for n, line in enumerate(page.read_text().splitlines(), 1)
            for m in COMMAND.finditer(line)]


def test_the_pages_show_links_and_commands():
    """Guards against a scan that silently finds nothing."""
    assert len(_links()) > 20 and len(_commands()) > 20


@pytest.mark.parametrize("page, line, target", _links(), ids=lambda v: v.name if isinstance(v, Path) else str(v))
def test_every_relative_link_resolves(page, line, target):
    path, _, anchor = target.partition("#")
    resolved = (page.parent / path) if path else page
    assert resolved.exists(), f"{page.name}:{line}: {target}: no such file"
    if anchor and resolved.suffix == ".md":
        headings = re.findall(r"^#+ (.*)$", resolved.read_text(), re.MULTILINE)
        assert anchor in {_anchor(h) for h in headings}, f"{page.name}:{line}: {target}: no such heading"


def _parser(target: str) -> argparse.ArgumentParser:
    if target.startswith("bench/"):
        spec = importlib.util.spec_from_file_location(f"bench_docs_{Path(target).stem}", REPO / target)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        saved = list(sys.path)
        sys.path.insert(0, str(REPO / "bench"))  # bench scripts import their sibling helpers
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path[:] = saved
    else:
        package = importlib.util.find_spec(target).submodule_search_locations is not None
        module = importlib.import_module(target + ".__main__" if package else target)
    return module.parser()


def _options(p: argparse.ArgumentParser, words: list[str]) -> set[str] | None:
    """The flags ``words`` may use: the parser's and its subcommand's (None: a subcommand forwarded elsewhere)."""
    known = set(p._option_string_actions)
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction) and words and words[0] in action.choices:
            sub = action.choices[words[0]]
            if not sub.add_help:
                return None
            known |= set(sub._option_string_actions)
    return known


@pytest.mark.parametrize("page, line, target, words", _commands(),
                         ids=lambda v: v.name if isinstance(v, Path) else None)
def test_every_command_shown_exists_with_its_flags(page, line, target, words):
    known = _options(_parser(target), words)
    if known is None:
        return
    words = words[: words.index("--")] if "--" in words else words  # after --: another command's arguments
    flags = {w.split("=")[0].rstrip(",;:.)") for w in words if w.startswith("--")}
    assert flags <= known, f"{page.name}:{line}: python {target}: no such flag {sorted(flags - known)}"


@pytest.mark.parametrize("page", [p for p in PAGES if p.parent != REPO], ids=lambda p: p.name)
def test_every_page_opens_with_its_command_and_stays_short(page):
    text = page.read_text()
    size = len(text.encode())
    assert size <= PAGE_BYTES, f"{page.name}: {size} bytes > {PAGE_BYTES}: move reference material to docs/appendix"
    opening = text.split("\n## ", 1)[0]
    assert OPENING_COMMAND.search(opening), f"{page.name}: no command in the opening (before the first ## heading)"
