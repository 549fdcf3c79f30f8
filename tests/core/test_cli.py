import json
from pathlib import Path

import pytest

from rlxf.cli import main
from tests.conftest import small_overrides


def test_unknown_key_exits_2_naming_it(capsys):
    assert main(["train", "train.stpes=3"]) == 2
    assert "unknown config key 'train.stpes'" in capsys.readouterr().err


def test_resume_needs_a_run_directory(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path / "nothing")]) == 2
    assert "no config.yaml" in capsys.readouterr().err


def test_algorithms_lists_presets(capsys):
    assert main(["algorithms"]) == 0
    out = capsys.readouterr().out
    for name in ("ppo", "grpo", "dr_grpo", "dapo", "rloo", "gspo"):
        assert name in out


def sft_accuracy(sft_model_dir) -> float:
    """The SFT start's held-out greedy accuracy as its own SFT run measured it (same eval set)."""
    return json.loads((Path(sft_model_dir).parents[2] / "summary.json").read_text())["final_eval_accuracy"]


def test_eval_prints_accuracy(tmp_path, sft_model_dir, capsys):
    overrides = [o for o in small_overrides(tmp_path, sft_model_dir) if o.startswith(("model.", "data."))]
    assert main(["eval", *overrides, "--n", "2", "--out", str(tmp_path / "eval"), "--quiet"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["eval_size"] == 16 and sft_accuracy(sft_model_dir) > 0
    assert result["models"][0]["greedy_accuracy"]["mean"] == pytest.approx(sft_accuracy(sft_model_dir))


def test_eval_model_flags_replace_the_recipe_model(tmp_path, tiny_model_dir, sft_model_dir, capsys):
    """model.path is the raw tiny model (accuracy 0); each --model is evaluated instead, in order."""
    overrides = [o for o in small_overrides(tmp_path, tiny_model_dir) if o.startswith(("model.", "data."))]
    args = ["eval", *overrides, "--model", sft_model_dir, "--model", tiny_model_dir, "--n", "2",
            "--out", str(tmp_path / "eval"), "--quiet"]
    assert main(args) == 0
    trained, raw = json.loads(capsys.readouterr().out)["models"]
    assert (trained["model"], raw["model"]) == (sft_model_dir, tiny_model_dir)
    assert trained["greedy_accuracy"]["mean"] == pytest.approx(sft_accuracy(sft_model_dir)) and sft_accuracy(sft_model_dir) > 0
    assert raw["greedy_accuracy"]["mean"] == 0.0
    assert raw["versus_first"]["difference_second_minus_first"]["greedy_accuracy"]["mean"] < 0
