"""The mutation check (tools/mutation_check.py) on a toy package: it finds the mutants it should, a
killable one is killed, an equivalent one survives, and listing it as equivalent makes the check pass."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

from mutants import module_mutants  # noqa: E402

TOY = '''"""Docstring: never mutated."""
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    LIMIT = 1


def scaled(x: int = 0) -> float:
    """Twice x, never below 0."""
    return max(2 * x - 1, 0)
'''


def test_mutants_of_a_toy_module_and_their_splices():
    mutants = module_mutants("toy/calc.py", TOY)
    found = {(m.line, m.operator, m.description) for m in mutants}
    assert found == {
        (8, "constant", "0 -> 1"),  # the default argument (its annotation is not touched)
        (10, "swap_call", "max(2 * x - 1, 0) -> min(2 * x - 1, 0)"),
        (10, "binop", "2 * x - 1 -> 2 * x + 1"),
        (10, "drop_term", "2 * x - 1 -> 2 * x"),
        (10, "binop", "2 * x -> 2 / x"),
        (10, "drop_term", "2 * x -> 2"),
        (10, "drop_term", "2 * x -> x"),
        (10, "constant", "2 -> 3"),
        (10, "constant", "1 -> 0"),
        (10, "constant", "1 -> 2"),
        (10, "constant", "0 -> 1"),
    }
    swap = next(m for m in mutants if m.operator == "swap_call")
    assert swap.key == "toy/calc.py | scaled | max(2 * x - 1, 0) -> min(2 * x - 1, 0)"
    changed = swap.apply(TOY).splitlines()
    assert changed[9] == "    return (min(2 * x - 1, 0))"
    assert changed[:9] == TOY.splitlines()[:9]  # every other line as written
    assert len({m.key for m in mutants}) == len(mutants)


def _check(root: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(TOOLS / "mutation_check.py"), "--root", str(root / "src"), "--modules", "toy/*.py",
               "--tests", str(root / "test_toy.py"), "--preload", "", "--out", str(out), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_killed_survivor_and_equivalent_on_a_toy_package(tmp_path):
    (tmp_path / "src" / "toy").mkdir(parents=True)
    (tmp_path / "src" / "toy" / "__init__.py").write_text("")
    # abs() of a square changes nothing: removing it is an equivalent mutant; the other two are bugs
    (tmp_path / "src" / "toy" / "calc.py").write_text("def square(x):\n    return abs(x * x)\n")
    (tmp_path / "test_toy.py").write_text("from toy.calc import square\n\n\ndef test_square():\n    assert square(3) == 9\n")
    first = _check(tmp_path, tmp_path / "first", "--equivalents", str(tmp_path / "none.txt"))
    assert first.returncode == 1, first.stdout + first.stderr
    report = json.loads((tmp_path / "first" / "report.json").read_text())
    outcomes = {r["mutation"]: r["status"] for r in report["mutants"]}
    assert outcomes == {"abs(x * x) -> x * x": "survived", "x * x -> x / x": "killed", "x * x -> x": "killed"}
    assert {r["killed_by"] and r["killed_by"].rsplit("/", 1)[-1] for r in report["mutants"]} == {None, "test_toy.py::test_square"}
    assert report["modules"]["toy/calc.py"] == {"mutants": 3, "killed": 2, "timeout": 0, "survived": 1,
                                                 "equivalent": 0, "error": 0}
    assert (tmp_path / "first" / "survivors.txt").read_text().startswith("toy/calc.py | square | abs(x * x) -> x * x")
    assert (tmp_path / "src" / "toy" / "calc.py").read_text() == "def square(x):\n    return abs(x * x)\n"

    equivalents = tmp_path / "equivalents.txt"
    equivalents.write_text("# module | function | mutation | why\n"
                           "toy/calc.py | square | abs(x * x) -> x * x | a square is never negative\n")
    again = _check(tmp_path, tmp_path / "again", "--equivalents", str(equivalents),
                   "--rerun", str(tmp_path / "first" / "report.json"))
    assert again.returncode == 0, again.stdout + again.stderr
    rerun = json.loads((tmp_path / "again" / "report.json").read_text())
    assert [(r["status"], r["reason"]) for r in rerun["mutants"]] == [("equivalent", "a square is never negative")]
