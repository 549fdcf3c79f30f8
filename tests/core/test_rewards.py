import time

import pytest

from rlxf.rewards.arithmetic import AnswerReward, extract_answer
from rlxf.rewards.registry import build_reward
from rlxf.roles.reward import RewardError, RewardRole


def test_answer_reward_scores():
    reward = AnswerReward(correct_weight=1.0, format_weight=0.1)
    out = reward.score(
        ["1+1=", "1+1=", "1+1=", "1+1=", "2+3="],
        ["2", "3", "2 apples", "2", "-5"],
        [{"answer": "2"}, {"answer": "2"}, {"answer": "2"}, {"answer": "2", "stopped": False}, {"answer": "5"}],
    )
    assert out.components["correct"] == [1.0, 0.0, 1.0, 1.0, 0.0]
    assert out.components["format"] == [1.0, 1.0, 0.0, 0.0, 1.0]
    assert out.scores == pytest.approx([1.1, 0.1, 1.0, 1.0, 0.1])
    assert extract_answer("x = 042") == "042" and extract_answer("none") is None


def test_reward_by_dotted_path():
    reward = build_reward("tests.core.helpers:length_reward")
    assert reward.score(["p"], ["abc"], [{}]).scores == [3.0]


def test_failing_reward_is_named():
    def broken(prompts, responses, metadata):
        raise KeyError("answer")

    role = RewardRole(build_reward.__globals__["as_reward"](broken), "my_rewards:broken")
    with pytest.raises(RewardError, match=r"reward 'my_rewards:broken' raised KeyError"):
        role.score(["p"], ["r"], [{}])


def test_hanging_reward_times_out():
    def slow(prompts, responses, metadata):
        time.sleep(5)
        return [0.0]

    role = RewardRole(build_reward.__globals__["as_reward"](slow), "slow_reward", timeout_seconds=0.2)
    with pytest.raises(RewardError, match=r"'slow_reward' did not return within 0.2s"):
        role.score(["p"], ["r"], [{}])


def test_wrong_number_of_scores_is_named():
    role = RewardRole(build_reward.__globals__["as_reward"](lambda p, r, m: [1.0, 2.0]), "twice")
    with pytest.raises(RewardError, match="twice"):
        role.score(["p"], ["r"], [{}])


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_scores_are_named_with_their_row(bad):
    role = RewardRole(build_reward.__globals__["as_reward"](lambda p, r, m: [1.0, bad, 0.0]), "shaky")
    with pytest.raises(RewardError, match=rf"'shaky' returned 1 non-finite scores \(NaN or inf\), first at row 1: "
                                          rf"{bad} for response 'b'"):
        role.score(["p", "p", "p"], ["a", "b", "c"], [{}, {}, {}])
