"""Imports run one way, down DESIGN.md's layers, and never in a circle.

Layers, top to bottom (a module imports from its own layer or below):

    cli, studio, sweep -> loops (and ``rlxf.config``) -> roles / eval / envs -> rewards / rollout / train / runtime
        -> models / data / algos / tracking -> batch, registry, awaitables, config_error, errors

``rlxf.config`` is the assembled config tree: it checks every registry's names and every loop x engine
x runtime x backend pair at load, so it sits with the loops; the sections live with the layer that
uses them (``train/optim_config.py``, ``algos/config.py``, ``runtime/config.py``). Every import
statement counts, module-level or inside a function (an implementation registers itself where it is
defined; a lazy ``Registry(modules=...)`` names its modules as strings, not imports); only imports
under ``if TYPE_CHECKING:`` (annotations, never executed) are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rlxf

SOURCE = Path(rlxf.__file__).parent
LAYERS = {
    "cli": 6, "studio": 6, "sweep": 6,
    "loops": 5, "config": 5, "overrides": 5, "config_reference": 5,
    "roles": 4, "eval": 4, "envs": 4,
    "rewards": 3, "rollout": 3, "train": 3, "runtime": 3,
    "models": 2, "data": 2, "algos": 2, "tracking": 2,
    "batch": 1, "registry": 1, "awaitables": 1, "config_error": 1, "errors": 1, "": 1,
}
# Upward imports still there, each with the issue that removes it (an empty set: none allowed).
KNOWN_UPWARD: set[tuple[str, str]] = set()
# Circles still there. tracking/ (its own owner's area): LoggingConfig's validator looks its sink names
# up in tracking/metrics.py, which imports LoggingConfig; METRIC_SINKS in a module of its own ends it.
KNOWN_CIRCLES = [["rlxf.tracking.config", "rlxf.tracking.metrics"]]


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    part = module.split(".")[1] if "." in module else ""
    assert part in LAYERS, f"{module}: its package {part!r} has no layer in tests/core/test_import_layers.py"
    return LAYERS[part]


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            inside |= {id(child) for stmt in node.body for child in ast.walk(stmt)}
    return inside


def rlxf_imports(path: Path) -> list[tuple[str, int]]:
    """(imported rlxf module, line) for every executed import of ``path``; ``from a.b import c``
    counts as ``a.b.c`` when that is a module, else ``a.b``."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_nodes(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
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
        if layer_of(target) > layer_of(module) and (module, target) not in KNOWN_UPWARD
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
    assert [c for c in circles(GRAPH) if c not in KNOWN_CIRCLES] == []


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
