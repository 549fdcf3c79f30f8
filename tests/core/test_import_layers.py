"""Imports run one way, down DESIGN.md's layers, and never in a circle.

Layers, top to bottom (a module imports from its own layer or below):

    cli, studio, sweep, checked_config -> loops (and ``rlxf.config``) -> roles / eval / envs
        -> rewards / rollout / serving / train / runtime -> models / data / algos / tracking
        -> batch, registry, awaitables, config_error, errors, disk_space

``rlxf.config`` is the assembled config tree and imports no loop; the sections live with the layer
that uses them (``train/optim_config.py``, ``algos/config.py``, ``runtime/config.py``). What needs the
loops to decide (the loop's name, loop x engine x runtime x backend) is ``rlxf.checked_config``, above
the loops, which every recipe load goes through. Every import statement counts: at module level, inside
a function, and under ``if TYPE_CHECKING:`` (an annotation-only import still ties the two modules
together, and a circle through one is a circle). An implementation registers itself where it is
defined; a lazy ``Registry(modules=...)`` names its modules as strings, not imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rlxf

SOURCE = Path(rlxf.__file__).parent
LAYERS = {
    "cli": 6, "__main__": 6, "studio": 6, "sweep": 6, "checked_config": 6,
    "loops": 5, "config": 5, "overrides": 5, "config_reference": 5,
    "roles": 4, "eval": 4, "envs": 4,
    "rewards": 3, "rollout": 3, "serving": 3, "train": 3, "runtime": 3,
    "models": 2, "data": 2, "algos": 2, "tracking": 2,
    "batch": 1, "registry": 1, "awaitables": 1, "freed_memory": 1, "config_error": 1, "errors": 1,
    "disk_space": 1, "": 1,
}
def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    part = module.split(".")[1] if "." in module else ""
    assert part in LAYERS, f"{module}: its package {part!r} has no layer in tests/core/test_import_layers.py"
    return LAYERS[part]


def rlxf_imports(path: Path) -> list[tuple[str, int]]:
    """(imported rlxf module, line) for every import statement of ``path`` (module level, in a function,
    under ``TYPE_CHECKING``); ``from a.b import c`` counts as ``a.b.c`` when that is a module, else ``a.b``."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names if alias.name.split(".")[0] == "rlxf"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "rlxf":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append((sub if sub in MODULES else node.module, node.lineno))
    return found


MODULES = {module_name(p): p for p in SOURCE.rglob("*.py")}
GRAPH = {module: rlxf_imports(path) for module, path in MODULES.items()}


def upward_imports(graph: dict[str, list[tuple[str, int]]]) -> list[str]:
    return sorted(
        f"{module}:{line} imports {target} (layer {layer_of(target)} above {layer_of(module)})"
        for module, imports in graph.items()
        for target, line in imports
        if layer_of(target) > layer_of(module)
    )


def circles(graph: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    edges = {m: {t for t, _ in imports if t in graph and t != m} for m, imports in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in edges:
        if node not in index:
            visit(node)
    return sorted(found)


def test_every_package_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_module_imports_a_layer_above_its_own():
    assert upward_imports(GRAPH) == []


def test_no_import_circles():
    assert circles(GRAPH) == []


def test_annotation_only_and_function_imports_count(tmp_path):
    """An import under ``TYPE_CHECKING`` or inside a function is an edge like any other."""
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n    from rlxf.batch import TrajectoryBatch\n"
                      "def f():\n    import rlxf.registry\n")
    assert rlxf_imports(source) == [("rlxf.batch", 3), ("rlxf.registry", 5)]


def test_the_checks_catch_an_upward_import_and_a_circle():
    """The checker itself, on a made-up graph: algos importing loops, and a two-module circle."""
    graph = {
        "rlxf.algos.kl": [("rlxf.loops.rl", 3)],
        "rlxf.loops.rl": [("rlxf.algos.kl", 1)],
        "rlxf.batch": [],
    }
    assert upward_imports(graph) == ["rlxf.algos.kl:3 imports rlxf.loops.rl (layer 5 above 2)"]
    assert circles(graph) == [["rlxf.algos.kl", "rlxf.loops.rl"]]


@pytest.mark.parametrize("path", sorted(SOURCE.rglob("*.py")), ids=lambda p: str(p.relative_to(SOURCE)))
def test_every_file_is_under_500_lines(path):
    assert len(path.read_text().splitlines()) < 500


def test_the_config_tree_imports_no_loop():
    """``rlxf.config`` shares the loops' layer but is their input: the checks that need a loop live in
    ``rlxf.checked_config``, above them (DESIGN.md)."""
    assert [target for target, _ in GRAPH["rlxf.config"] if target.split(".")[:2] == ["rlxf", "loops"]] == []
