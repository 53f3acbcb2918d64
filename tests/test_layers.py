"""The package's imports point one way: the layer table of ../shared/design.md, checked from the source (ast).

Every `import robostream.X` / `from robostream.X import ...` anywhere in a module (function-level imports too)
is an edge between top-level parts of the package. An edge the table does not allow, or any cycle between parts,
fails the test, so the structure stays true without anyone watching.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "robostream"
UTILITIES = {"errors", "process_local", "memory", "numbers"}  # leaves every layer may use
# What each part may import (besides itself and the utilities), lowest layers first.
LAYERS: dict[str, set[str]] = {
    "errors": set(), "process_local": set(), "memory": set(), "numbers": set(),
    "plan": set(),
    "storage": set(),
    "video": {"storage"},
    "format": {"storage"},
    "datasets": {"plan", "storage", "video", "format"},
    "writer": {"format"},
    "summary": {"format", "video"},
    "synth": {"format", "video", "writer"},
    "convert": {"format", "storage", "video"},
    "bench": {"datasets", "plan", "storage", "video", "format", "summary", "synth"},
    "cli": {"bench", "convert", "datasets", "summary", "synth", "format", "video"},
    "__init__": {"datasets", "video"},
}
# Single modules allowed one more edge: the v3.0 writer encodes videos; it belongs in writer/ but stays in format/
# while tests/datasets/test_batch_assembly.py (another change in flight) imports it from there.
MODULE_EXCEPTIONS = {("format.writer", "video")}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def import_edges(package: Path = PACKAGE) -> set[tuple[str, str]]:
    """(importing module, imported top-level part) for every robostream import in the package."""
    edges = set()
    for path in package.rglob("*.py"):
        relative = path.relative_to(package.parent).with_suffix("")
        module = ".".join(relative.parts[:-1] if relative.name == "__init__" and len(relative.parts) > 2
                          else relative.parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                else [a.name for a in node.names] if isinstance(node, ast.Import) else []
            edges.update((module, _part(n)) for n in names if n == "robostream" or n.startswith("robostream."))
    return edges


def violations(edges: set[tuple[str, str]], layers: Mapping[str, set[str]] = LAYERS) -> list[str]:
    """Edges against the table, and cycles between parts; empty when the structure holds."""
    found = []
    graph: dict[str, set[str]] = {}
    for module, target in sorted(edges):
        source = _part(module)
        if source == target:
            continue
        graph.setdefault(source, set()).add(target)
        allowed = layers.get(source)
        if allowed is None:
            found.append(f"{module}: robostream.{source} is not in the layer table")
        elif target not in allowed | UTILITIES and (module.removeprefix("robostream."), target) not in \
                MODULE_EXCEPTIONS:
            found.append(f"{module} imports robostream.{target}, which robostream.{source} may not use")
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append("import cycle: " + " -> ".join(trail[trail.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_imports_follow_the_layer_table():
    edges = import_edges()
    assert len(edges) > 50  # the parse found the package's imports
    assert violations(edges) == []


def test_a_forbidden_import_or_a_cycle_is_caught():
    edges = import_edges()
    assert violations(edges | {("robostream.storage.source", "format")}) == [
        "robostream.storage.source imports robostream.format, which robostream.storage may not use",
        "import cycle: format -> storage -> format"]
    cyclic = {"a": {"b"}, "b": {"a"}}
    assert violations({("robostream.a.x", "b"), ("robostream.b.y", "a")}, cyclic) == ["import cycle: a -> b -> a"]
