"""Imports run downhill: the top-level packages stack as neos_core <- tool_server <- verl_ext <- data_gen <- bench
(lowest first), and no module imports itself back through other modules.

The walk reads every absolute and relative ``import``/``from`` statement of every .py file, function-level and
TYPE_CHECKING ones included: a deferred import is still a dependency, and a cycle hidden in a function is still a
cycle. Run as a script to print every finding (``python tests/cli/test_import_layers_on_cpu.py``)."""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# lowest first: a package may import only the packages at or below its own rank
LAYERS = ("neos_core", "tool_server", "verl_ext", "data_gen", "bench")
RANK = {name: rank for rank, name in enumerate(LAYERS)}


@dataclass(frozen=True)
class Import:
    """One imported module, as written in one file: ``where`` is ``path:line`` relative to the repository."""

    where: str
    source: str  # the importing module's dotted name
    target: str  # the imported module's dotted name (``from a import b`` names ``a.b`` when that is a module)


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    if rel.parts[0] == "bench":  # bench scripts import their siblings as top-level modules
        return rel.name
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def layer(module: str) -> str | None:
    top = module.split(".")[0]
    if top in RANK:
        return top
    return "bench" if (REPO / "bench" / f"{top}.py").exists() else None


def source_files() -> dict[str, Path]:
    """Every module of the layers, by dotted name."""
    return {
        module_name(path): path
        for name in LAYERS
        for path in sorted((REPO / name).rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def imports(path: Path, modules: dict[str, Path]) -> list[Import]:
    """The modules ``path`` imports that belong to the layers."""
    source = module_name(path)
    package = source if path.name == "__init__.py" else source.rpartition(".")[0]
    where_of = path.relative_to(REPO).as_posix()
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        found += [Import(f"{where_of}:{node.lineno}", source, t) for t in dict.fromkeys(targets) if layer(t)]
    return found


def all_imports() -> list[Import]:
    modules = source_files()
    return [imp for path in modules.values() for imp in imports(path, modules)]


def upward(found: list[Import]) -> list[Import]:
    return [imp for imp in found if RANK[layer(imp.target)] > RANK[layer(imp.source)]]


def cycles(found: list[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as its sorted module names."""
    modules = source_files()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in found:
        if imp.target in modules and imp.target != imp.source:
            graph[imp.source].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def describe_cycle(component: list[str], found: list[Import]) -> str:
    members = set(component)
    return "; ".join(
        f"{imp.where} imports {imp.target}" for imp in found if imp.source in members and imp.target in members
    )


def test_no_package_imports_a_package_above_it():
    bad = upward(all_imports())
    assert not bad, "upward imports:\n" + "\n".join(f"{i.where}: {i.source} imports {i.target}" for i in bad)


def test_no_module_imports_itself_through_others():
    found = all_imports()
    assert not (bad := cycles(found)), "import cycles:\n" + "\n".join(describe_cycle(c, found) for c in bad)


def test_checker_sees_function_level_relative_and_upward_imports(tmp_path, monkeypatch):
    """The walk must see a deferred import, resolve a relative one, rank a bench sibling as bench and neos_core
    lowest."""
    for rel, text in {
        "neos_core/__init__.py": "",
        "neos_core/base.py": "import tool_server.a\n",
        "tool_server/__init__.py": "",
        "tool_server/a.py": "def f():\n    from data_gen.x import y\n",
        "tool_server/sub/__init__.py": "",
        "tool_server/sub/b.py": "from .. import a\nfrom . import c\n",
        "tool_server/sub/c.py": "import tool_server.sub.b\n",
        "data_gen/__init__.py": "",
        "data_gen/x.py": "y = 1\nimport bench_one\n",
        "verl_ext/__init__.py": "",
        "bench/bench_one.py": "import data_gen.x\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    found = all_imports()
    assert [(i.where, i.target) for i in upward(found)] == [
        ("neos_core/base.py:1", "tool_server.a"),
        ("tool_server/a.py:2", "data_gen.x"),
        ("data_gen/x.py:2", "bench_one"),
    ]
    assert cycles(found) == [["bench_one", "data_gen.x"], ["tool_server.sub.b", "tool_server.sub.c"]]


if __name__ == "__main__":
    found = all_imports()
    for imp in upward(found):
        print(f"UP {imp.where}: {imp.source} -> {imp.target}")
    for component in cycles(found):
        print("CYCLE", describe_cycle(component, found))
