"""The package's imports point one way: the layer table of docs/architecture.md, checked from the source (ast).

Every `import robostream.X` / `from robostream.X import ...` anywhere in a module (function-level imports too), and
every string naming a robostream module (what importlib loads: robostream/__init__.py's exports, factory specs),
is an edge between top-level parts of the package. An edge the table does not allow, an edge the table allows but
no module uses, a part reaching (through any chain) a part the table's closure does not reach, a cycle between
parts or between modules, or a page whose table differs fails the test, so both stay exactly true without anyone
watching.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "robostream"
ARCHITECTURE = Path(__file__).parents[1] / "docs" / "architecture.md"
# Leaves every layer may use.
UTILITIES = {"errors", "process_local", "memory", "numbers", "durable", "collector", "array_file"}
# What each part imports (besides itself and the utilities), lowest layers first: exactly the edges the code uses.
LAYERS: dict[str, set[str]] = {
    "errors": set(),
    "process_local": set(),
    "memory": set(),
    "numbers": set(),
    "durable": set(),
    "collector": set(),
    "array_file": set(),
    "plan": set(),
    "storage": set(),
    "video": set(),
    "format": {"storage"},
    "writer": {"format", "video"},
    "datasets": {"plan", "storage", "video", "format"},
    "summary": {"format"},
    "synth": {"format", "video", "writer"},
    "convert": {"format", "video"},
    "testing": set(),
    "bench": {"plan", "datasets", "storage", "video", "format", "testing"},
    "augment": set(),
    "lerobot": {"plan", "datasets", "storage", "format", "augment"},
    "cli": {"bench", "convert", "summary", "synth", "lerobot"},
    "__init__": {"datasets", "storage", "video"},
}
MODULE_NAME = re.compile(r"robostream(\.\w+)+(:\w+)?")  # "robostream.bench.loaders:build" names a factory too


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_imports(package: Path = PACKAGE) -> set[tuple[str, str]]:
    """(importing module, imported module) for every robostream import in the package.

    A name imported from a module (`from robostream.x import name`) counts as that module, a submodule
    (`from robostream.x import y`) as the submodule; the parent packages an import runs first are left out (Python
    allows those loops: the package is already being imported).

    Args:
        package: the package's folder.
    """
    modules = {}
    for path in package.rglob("*.py"):
        relative = path.relative_to(package.parent).with_suffix("")
        modules[".".join(relative.parts[:-1] if relative.name == "__init__" else relative.parts)] = path

    def resolve(name: str) -> str:  # the longest module the name starts with
        while name not in modules and "." in name:
            name = name.rpartition(".")[0]
        return name

    edges = set()
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.value.partition(":")[0]]
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_NAME.fullmatch(node.value)
                else []
            )
            edges.update(
                (module, resolve(n))
                for n in names
                if (n == "robostream" or n.startswith("robostream.")) and resolve(n) != module
            )
    return edges


def import_edges(package: Path = PACKAGE) -> set[tuple[str, str]]:
    """(importing module, imported top-level part) for every robostream import in the package.

    Args:
        package: the package's folder.
    """
    return {(module, _part(target)) for module, target in module_imports(package)}


def cycles(graph: Mapping[str, set[str]]) -> list[str]:
    """One loop through each cycle of `graph` found depth-first; empty when it has none."""
    found = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append("import cycle: " + " -> ".join(trail[trail.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def _part_graph(edges: set[tuple[str, str]]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, target in edges:
        if _part(module) != target:
            graph.setdefault(_part(module), set()).add(target)
    return graph


def violations(edges: set[tuple[str, str]], layers: Mapping[str, set[str]] = LAYERS) -> list[str]:
    """Edges against the table, and cycles between parts; empty when the structure holds.

    Args:
        edges: (importing module, imported part) pairs, as `import_edges` finds them.
        layers: what each part may import besides itself and the utilities.
    """
    found = []
    for module, target in sorted(edges):
        source = _part(module)
        if source == target:
            continue
        allowed = layers.get(source)
        if allowed is None:
            found.append(f"{module}: robostream.{source} is not in the layer table")
        elif target not in allowed | UTILITIES:
            found.append(f"{module} imports robostream.{target}, which robostream.{source} may not use")
    return found + cycles(_part_graph(edges))


def unused_edges(edges: set[tuple[str, str]], layers: Mapping[str, set[str]] = LAYERS) -> list[str]:
    """Edges the table allows that no module uses: a table that says more than the code does
    hides which layers really depend on which.

    Args:
        edges: (importing module, imported part) pairs, as `import_edges` finds them.
        layers: what each part may import besides itself and the utilities.
    """
    graph = _part_graph(edges)
    return [
        f"the table lets robostream.{source} use robostream.{target}, which no module of it imports"
        for source, targets in sorted(layers.items())
        for target in sorted(targets - graph.get(source, set()))
    ]


def _reach(graph: Mapping[str, set[str]]) -> dict[str, dict[str, list[str]]]:
    """For every part, each part it reaches with a shortest chain leading there (breadth-first)."""
    reach = {}
    for start in graph:
        trails: dict[str, list[str]] = {}
        queue = [[start]]
        while queue:
            trail = queue.pop(0)
            for nxt in sorted(graph.get(trail[-1], ())):
                if nxt != start and nxt not in trails:
                    trails[nxt] = trail + [nxt]
                    queue.append(trails[nxt])
        reach[start] = trails
    return reach


def reach_violations(edges: set[tuple[str, str]], layers: Mapping[str, set[str]] = LAYERS) -> list[str]:
    """Parts that reach, through any chain of imports, a part the table's own transitive closure does not: what
    a forbidden edge drags in above it, each with the chain that reaches it.

    Args:
        edges: (importing module, imported part) pairs, as `import_edges` finds them.
        layers: what each part may import besides itself and the utilities.
    """
    allowed_reach = _reach({source: set(targets) | UTILITIES for source, targets in layers.items()})
    return [
        f"robostream.{source} reaches robostream.{target} ({' -> '.join(trail)}), which the table's closure "
        f"does not allow"
        for source, trails in sorted(_reach(_part_graph(edges)).items())
        for target, trail in sorted(trails.items())
        if target not in allowed_reach.get(source, {})
    ]


def test_imports_follow_the_layer_table():
    edges = import_edges()
    assert len(edges) > 50  # the parse found the package's imports
    assert violations(edges) == []
    assert reach_violations(edges) == []


def test_no_import_cycle_between_modules():
    graph: dict[str, set[str]] = {}
    for module, target in module_imports():
        graph.setdefault(module, set()).add(target)
    assert cycles(graph) == []


def test_the_table_lists_only_edges_the_code_uses():
    assert unused_edges(import_edges()) == []


def documented_layers(text: str) -> dict[str, set[str]]:
    """The layer table of docs/architecture.md: each part (a first cell may name several) and what it imports.

    Args:
        text: the page.
    """
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    layers = {}
    for row in section.splitlines():
        cells = row.split("|")
        if row.startswith("| `"):
            layers.update(dict.fromkeys(re.findall(r"`(\w+)`", cells[1]), set(re.findall(r"`(\w+)`", cells[2]))))
    return layers


def test_the_architecture_page_has_the_same_table():
    documented = documented_layers(ARCHITECTURE.read_text())
    assert sorted(documented) == sorted(LAYERS), "docs/architecture.md's layer table names other parts than LAYERS"
    assert {part: sorted(uses) for part, uses in documented.items() if uses != LAYERS[part]} == {}, (
        "docs/architecture.md's imports column differs from LAYERS"
    )


def test_a_forbidden_import_or_a_cycle_is_caught():
    edges = import_edges()
    assert violations(edges | {("robostream.storage.store", "format")}) == [
        "robostream.storage.store imports robostream.format, which robostream.storage may not use",
        "import cycle: format -> storage -> format",
    ]
    cyclic = {"a": {"b"}, "b": {"a"}}
    assert violations({("robostream.a.x", "b"), ("robostream.b.y", "a")}, cyclic) == ["import cycle: a -> b -> a"]
    # the loop convert/ had: the package's orchestration launched datatrove_steps, which imported the package
    loop = {"convert": {"convert.datatrove_steps"}, "convert.datatrove_steps": {"convert"}}
    assert cycles(loop) == ["import cycle: convert -> convert.datatrove_steps -> convert"]


def test_an_unused_edge_is_named():
    edges = import_edges()
    assert unused_edges(edges, {**LAYERS, "storage": {"video"}}) == [
        "the table lets robostream.storage use robostream.video, which no module of it imports"
    ]


def test_a_forbidden_transitive_import_is_caught(tmp_path):
    """A fake package: app uses lib (allowed), lib uses core inside a function (forbidden), so app reaches core."""
    files = {
        "__init__.py": "",
        "app/__init__.py": "",
        "app/main.py": "from robostream.lib.api import run\n",
        "lib/__init__.py": "",
        "lib/api.py": "def run():\n    import robostream.core.disk\n",
        "core/__init__.py": "",
        "core/disk.py": "import robostream.errors\n",
        "errors.py": "",
    }
    for name, text in files.items():
        (tmp_path / "robostream" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "robostream" / name).write_text(text)
    edges = import_edges(tmp_path / "robostream")
    assert edges == {("robostream.app.main", "lib"), ("robostream.lib.api", "core"), ("robostream.core.disk", "errors")}
    layers = {"errors": set(), "core": set(), "lib": set(), "app": {"lib"}}
    assert reach_violations(edges, layers) == [
        "robostream.app reaches robostream.core (app -> lib -> core), which the table's closure does not allow",
        "robostream.lib reaches robostream.core (lib -> core), which the table's closure does not allow",
    ]
    assert violations(edges, layers) == ["robostream.lib.api imports robostream.core, which robostream.lib may not use"]
    # allowed one layer down, app reaches core through the table's closure without naming it
    assert reach_violations(edges, {**layers, "lib": {"core"}}) == []
