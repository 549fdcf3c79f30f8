import json

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


def test_eval_prints_accuracy(tmp_path, tiny_model_dir, capsys):
    overrides = [o for o in small_overrides(tmp_path, tiny_model_dir) if o.startswith(("model.", "data."))]
    assert main(["eval", *overrides, "--n", "2", "--out", str(tmp_path / "eval"), "--quiet"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["eval_size"] == 16 and 0.0 <= result["models"][0]["greedy_accuracy"]["mean"] <= 1.0
