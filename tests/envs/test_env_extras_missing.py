"""A recipe naming ``env: verifiers`` or ``env: openenv`` where its library is not installed: one ``rlxf:``
line with the install command, exit code 2, no traceback, nothing run (this runs whether the extras are
installed or not: the test hides them)."""

import sys
from pathlib import Path

import pytest

from rlxf.cli import main

RECIPES = Path(__file__).parents[2] / "recipes"
CASES = {"verifiers_sums.yaml": ("verifiers", "pip install 'rlxf[verifiers]'"),
         "openenv_guess.yaml": ("openenv", "pip install 'rlxf[openenv]'")}


@pytest.mark.parametrize("recipe", sorted(CASES))
def test_missing_library_is_one_line_with_the_install_command(recipe, tmp_path, tiny_model_dir, monkeypatch, capsys):
    package, install = CASES[recipe]
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")] + [package]:
        monkeypatch.setitem(sys.modules, name, None)  # `import package` now raises ImportError
    monkeypatch.chdir(RECIPES.parent)
    run_dir = tmp_path / "run"
    code = main(["train", str(RECIPES / recipe), f"model.path={tiny_model_dir}", "train.steps=1",
                 f"run_dir={run_dir}", "logging.plot=false"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("rlxf: ") and install in lines[0] and "Traceback" not in err
    assert not (run_dir / "checkpoints").exists()
