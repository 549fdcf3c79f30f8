"""The `rlxf` command finds a reward module in the working directory (as `python -m` would), and
says so in one line when a module does not import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rlxf.cli import main

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_reward_module_in_the_working_directory(tmp_path, tiny_model_dir):
    work, launcher = tmp_path / "work", tmp_path / "bin"
    work.mkdir(), launcher.mkdir()
    (work / "my_reward.py").write_text("def seven(prompts, responses, metadata):\n    return [7.0] * len(responses)\n")
    # a launcher outside the working directory, as the installed `rlxf` script is
    (launcher / "rlxf_cli.py").write_text("import sys\nfrom rlxf.cli import main\nsys.exit(main())\n")
    args = ["eval", f"model.path={tiny_model_dir}", "data.eval_size=2", "reward.function=my_reward:seven",
            "--n", "1", "--out", str(tmp_path / "eval"), "--quiet"]
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(launcher / "rlxf_cli.py"), *args], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert result["reward"] == "my_reward:seven" and result["models"][0]["mean_reward"]["mean"] == 7.0


def test_missing_reward_module_is_one_line(tmp_path, tiny_model_dir, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["eval", f"model.path={tiny_model_dir}", "data.eval_size=2", "reward.function=not_here:seven",
            "--n", "1", "--out", str(tmp_path / "eval"), "--quiet"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlxf: reward.function 'not_here:seven': cannot import 'not_here'")
