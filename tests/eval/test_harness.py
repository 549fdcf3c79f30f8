"""The evaluation harness end to end on scripted answers (every number hand-computed), and ``rlxf eval``
on the tiny model: two checkpoints, eval.json, per-problem rows, the eval reward."""

import json

import pytest

from rlxf.cli import main
from rlxf.eval.compare import compare_checkpoints
from rlxf.eval.harness import EvalSettings, evaluate_checkpoint
from rlxf.rewards.arithmetic import AnswerReward, extract_answer
from tests.conftest import small_overrides
from tests.eval.scripted import ScriptedRollout

ROWS = [{"prompt": "1+1=", "answer": "2"}, {"prompt": "2+2=", "answer": "4"}]
GREEDY = {"1+1=": "2", "2+2=": "5"}
SAMPLED = {"1+1=": ["2", "3", "2", "7"], "2+2=": ["5", "5", "4", "6"]}


def test_every_metric_of_scripted_answers():
    settings = EvalSettings(n=4, ks=[1, 2, 4], batch_size=4, max_new_tokens=4)  # 1 problem per generate call
    summary, problems = evaluate_checkpoint(ScriptedRollout(GREEDY, SAMPLED), AnswerReward(), ROWS, settings,
                                            extract_answer, progress=False)
    means = {k: v["mean"] for k, v in summary.items()}
    assert means == pytest.approx({
        "greedy_accuracy": 0.5,  # "2" right, "5" wrong
        "mean_reward": (0.6 + 0.35) / 2,  # correct + 0.1 format (every answer is a bare number that stopped)
        "pass@1": (2 / 4 + 1 / 4) / 2,
        "pass@2": ((1 - 1 / 6) + (1 - 3 / 6)) / 2,  # 1 - C(n-c, 2) / C(4, 2)
        "pass@4": 1.0,
        "maj@1": (2 / 4 + 1 / 4) / 2,
        "maj@2": (1.0 + 0.5) / 2,  # [2,3]->2 [2,7]->2 ; [5,5]->5 wrong, [4,6]->4 right
        "maj@4": 0.5,  # "2" right ; "5" wrong
    })
    assert problems[1] == {
        "problem": 1, "prompt": "2+2=", "answer": "4", "greedy_response": "5", "greedy_score": pytest.approx(0.1),
        "greedy_correct": 0.0, "samples": 4, "solved_samples": 1, "mean_reward": pytest.approx(0.35),
        "pass@1": 0.25, "pass@2": 0.5, "pass@4": 1.0, "maj@1": 0.25, "maj@2": 0.5, "maj@4": 0.0,
        "answers": ["5", "5", "4", "6"],
    }
    for value in summary.values():
        assert value["low"] <= value["mean"] <= value["high"]


def test_k_beyond_n_is_refused():
    with pytest.raises(ValueError, match=r"--k \[8\]: every k must be between 1 and --n 4"):
        EvalSettings(n=4, ks=[1, 8])


def test_comparison_names_the_problems_each_checkpoint_solves():
    def rows(greedy):
        return [{"problem": i, "greedy_correct": g, "pass@1": g / 2, "mean_reward": g} for i, g in enumerate(greedy)]

    out = compare_checkpoints(rows([1, 0, 1, 0]), rows([1, 1, 0, 0]), ks=[1])
    assert out["greedy_solved"] == {"only_first": [2], "only_second": [1], "both": 1, "neither": 1}
    diff = out["difference_second_minus_first"]
    assert diff["greedy_accuracy"]["mean"] == 0.0 and diff["greedy_accuracy"]["sign_test_p"] == 1.0
    assert set(diff) == {"greedy_accuracy", "pass@1", "mean_reward"}


def test_rlxf_eval_two_checkpoints_with_the_eval_reward(tmp_path, tiny_model_dir, capsys):
    overrides = [o for o in small_overrides(tmp_path, tiny_model_dir) if o.startswith(("model.", "data."))]
    out = tmp_path / "eval"
    args = ["eval", *overrides, "eval.reward.function=tests.core.helpers:length_reward", "--model", tiny_model_dir,
            "--model", tiny_model_dir, "--n", "4", "--out", str(out), "--quiet"]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result == json.loads((out / "eval.json").read_text())
    assert result["reward"] == "tests.core.helpers:length_reward" and result["ks"] == [1, 2, 4]
    assert result["eval_size"] == 16 and len(result["models"]) == 2
    rows = [json.loads(line) for line in (out / "eval_problems.jsonl").read_text().splitlines()]
    assert [r["model"] for r in rows] == [0] * 16 + [1] * 16
    for row in rows:  # scored by eval.reward (characters), not the training reward (0 / 0.1 / 1 / 1.1)
        assert row["greedy_score"] == float(len(row["greedy_response"]))
    first, second = result["models"]
    assert first["mean_reward"]["mean"] == pytest.approx(sum(r["mean_reward"] for r in rows[:16]) / 16)
    # the same weights and the same sampling seed: identical answers, a zero difference
    assert first["pass@4"] == second["pass@4"]
    versus = second["versus_first"]
    assert versus["greedy_solved"]["only_first"] == [] and versus["greedy_solved"]["only_second"] == []
    assert versus["difference_second_minus_first"]["mean_reward"] == {
        "mean": 0.0, "low": 0.0, "high": 0.0, "sign_test_p": 1.0, "better": 0, "worse": 0}


def test_rlxf_eval_names_a_missing_checkpoint(tmp_path, capsys):
    assert main(["eval", "--model", str(tmp_path / "nope"), "--quiet"]) == 2
    assert f"--model {tmp_path / 'nope'}: no such checkpoint folder" in capsys.readouterr().err


def test_rlxf_eval_takes_a_model_source_name_as_model(tmp_path, capsys):
    # tiny:NAME (like smollm2:135m-instruct or a .gguf file) is no folder: it is built, then evaluated
    args = ["eval", "data.eval_size=4", "--model", "tiny:default", "--n", "2", "--out", str(tmp_path), "--quiet"]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert [m["model"] for m in result["models"]] == ["tiny:default"] and result["eval_size"] == 4


def test_held_out_metrics_carry_the_rewards_components():
    """A pairwise judge that always says A, on both orders of two pairs: accuracy 0.5, position bias +0.5."""
    from rlxf.eval.accuracy import evaluate
    from rlxf.rewards.judge_agreement import JudgeAgreementReward

    rows = [{"prompt": f"p{i}", "form": "pairwise", "label": label, "pair": str(i // 2), "order": i % 2}
            for i, label in enumerate(["A", "B", "B", "A"])]
    rollout = ScriptedRollout({r["prompt"]: "[[A]]" for r in rows}, {})
    metrics = evaluate(rollout, JudgeAgreementReward(), rows, batch_size=3, max_new_tokens=4)
    assert metrics == pytest.approx({
        "eval/accuracy": 0.5, "eval/reward": 0.5, "eval/response_length": 1.0,
        "eval/reward/correct": 0.5, "eval/reward/malformed": 0.0,
        "eval/reward/first_bias": 0.5,  # says A on all 4, the label is A on 2: (1 + 0 + 1 + 0) / 4
    })
