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


def test_over_long_prompt_stops_rlxf_train_before_the_run_in_one_line(tmp_path, checkpoints, capsys):
    rows = [{"prompt": "What is 1 + 1?", "answer": "2"}] * 5 + [{"prompt": "What is 12 + 7? " * 20, "answer": "19"}]
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["train", f"run_dir={tmp_path / 'run'}", f"model.path={checkpoints['qwen2']}", "data.task=file",
            f"data.path={data}", "data.task_args={}", "data.eval_size=1", "data.max_prompt_tokens=32",
            "logging.progress_bar=false"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlxf: 1 eval prompt(s) exceed data.max_prompt_tokens=32:")
    assert f"{data}:6 (" in err[0]
    assert not (tmp_path / "run" / "checkpoints").exists()  # nothing ran: --resume would meet the same line
