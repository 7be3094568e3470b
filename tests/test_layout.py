"""The shape of helpers/: no import circles, no module over 400 lines, no reaching into another
module's private names, and the learner's modules at the top (README "What is in helpers/")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

HELPERS = Path(__file__).resolve().parent.parent / "helpers"
MAX_LINES = 400
# what the notebooks import sits at the top of helpers/; the machinery lives in subpackages
LEARNER_MODULES = {"checkpoint", "checks", "data", "faults", "figures", "gpt", "mesh",
                   "model_parallel", "sequences_and_experts", "sharding", "taught", "text",
                   "timing"}
SUBPACKAGES = {"calls", "cluster", "exercises", "jobs", "machine"}


def module_name(path: Path) -> str:
    parts = path.relative_to(HELPERS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(HELPERS.rglob("*.py"))}


def is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def absolute(name: str, node: ast.ImportFrom) -> str:
    """The module an ImportFrom names, relative dots resolved against the importing module."""
    if not node.level:
        return node.module or ""
    base = name.split(".")
    base = base if is_package(name) else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(name: str) -> dict[str, int]:
    """{helpers module: line} for every import in the module, function-level and
    TYPE_CHECKING-only ones included: each is a dependency a reader has to follow."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = absolute(name, node)
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in MODULES else source
                       for a in node.names]
        else:
            continue
        for target in targets:
            if target in MODULES and target != name:
                found.setdefault(target, node.lineno)
    return found


def circles() -> list[list[str]]:
    """Every strongly connected set of modules of more than one (Tarjan), each as a path."""
    graph = {name: imports(name) for name in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for name in MODULES:
        if name not in index:
            visit(name)
    return found


def test_the_imports_of_helpers_form_no_circle():
    found = circles()
    graph = {name: imports(name) for name in MODULES}
    described = [" ; ".join(f"{a} -> {b} (line {graph[a][b]})" for a in group
                            for b in group if b in graph[a]) for group in found]
    assert not found, "import circles in helpers/:\n" + "\n".join(described)


def test_the_circle_finder_finds_a_planted_circle(monkeypatch):
    """The test above can fail: two modules that import each other are one circle."""
    real = imports

    def planted(name: str) -> dict[str, int]:
        extra = {"helpers.timing": {"helpers.text": 1}, "helpers.text": {"helpers.timing": 1}}
        return {**real(name), **extra.get(name, {})}

    monkeypatch.setitem(globals(), "imports", planted)
    assert ["helpers.text", "helpers.timing"] in circles()


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_over_400_lines(name):
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[name]} has {lines} lines (at most {MAX_LINES})"


def private_uses(name: str) -> list[str]:
    """Private names (_x, not __x__) of other helpers modules that this module uses."""
    tree = ast.parse(MODULES[name].read_text())
    aliases: dict[str, str] = {}  # local name -> helpers module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = absolute(name, node)
            for a in node.names:
                full = f"{source}.{a.name}"
                if full in MODULES:
                    aliases[a.asname or a.name] = full
                elif source in MODULES and a.name.startswith("_") and source != name:
                    found.append(f"line {node.lineno}: from {source} import {a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in MODULES and a.asname:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            found.append(f"line {node.lineno}: {aliases[node.value.id]}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names():
    found = {name: uses for name in MODULES if (uses := private_uses(name))}
    assert not found, "private names used across modules:\n" + "\n".join(
        f"{name}: {', '.join(uses)}" for name, uses in found.items())


def test_the_top_of_helpers_holds_the_learners_modules_and_the_subpackages():
    top = {p.stem for p in HELPERS.glob("*.py") if p.stem != "__init__"}
    packages = {p.parent.name for p in HELPERS.glob("*/__init__.py")}
    learner = top | (packages & LEARNER_MODULES)
    assert learner == LEARNER_MODULES, (
        f"at the top of helpers/ but no lesson's module: {sorted(learner - LEARNER_MODULES)}; "
        f"missing: {sorted(LEARNER_MODULES - learner)} (update README 'What is in helpers/')")
    assert packages - LEARNER_MODULES == SUBPACKAGES


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_says_which_notebook_introduces_it_or_what_it_is_for(name):
    doc = ast.get_docstring(ast.parse(MODULES[name].read_text()))
    assert doc, f"{MODULES[name]} has no docstring"
