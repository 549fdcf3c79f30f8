"""Reward protocol (sync and async), weighted mixing, normalisation, clipping, math and format rewards."""

import asyncio

import pytest

from rlxf.rewards.base import RewardOutput, call_reward
from rlxf.rewards.format import FormatReward, overlong_fraction
from rlxf.rewards.math_answer import MathAnswerReward, extract_final_answer, fallback_match
from rlxf.rewards.mix import MixedReward, zscore
from rlxf.rewards.registry import build_reward
from rlxf.roles.reward import RewardError, RewardRole


def constant(prompts, responses, metadata):
    return RewardOutput(scores=[float(len(r)) for r in responses], components={"chars": [1.0] * len(responses)})


async def async_half(prompts, responses, metadata):
    await asyncio.sleep(0)
    return [0.5 for _ in responses]


class AsyncReward:
    async def score(self, prompts, responses, metadata):
        await asyncio.sleep(0)
        return RewardOutput(scores=[1.0] * len(responses), components={"chars": [2.0] * len(responses)})


def test_async_function_and_async_method_are_scored():
    assert call_reward(build_reward("tests.rewards.test_mix_and_protocol:async_half"), ["p"], ["r"], [{}]).scores == [0.5]
    role = RewardRole(AsyncReward(), "async")
    assert role.score(["p", "q"], ["a", "b"], [{}, {}]).scores == [1.0, 1.0]


def test_mix_weights_components_and_name_clash():
    mix = MixedReward([
        {"function": "tests.rewards.test_mix_and_protocol:constant", "weight": 2.0, "name": "len"},
        {"function": "tests.rewards.test_mix_and_protocol:async_half", "weight": -1.0, "name": "half"},
        {"function": "tests.rewards.test_mix_and_protocol:AsyncReward", "weight": 0.5, "name": "one"},
    ])
    out = mix.score(["p", "p"], ["ab", "abcd"], [{}, {}])
    assert out.scores == [2 * 2 - 0.5 + 0.5, 2 * 4 - 0.5 + 0.5]
    assert out.components["len"] == [2.0, 4.0] and out.components["half"] == [0.5, 0.5]
    assert out.components["len/chars"] == [1.0, 1.0] and out.components["one/chars"] == [2.0, 2.0]


def test_mix_normalisation_and_clipping():
    mix = MixedReward([{"function": "tests.rewards.test_mix_and_protocol:constant"}], normalize="zscore", clip=[-0.5, 2])
    out = mix.score(["p"] * 3, ["a", "abc", "abcde"], [{}] * 3)
    assert out.scores == pytest.approx([-0.5, 0.0, 1.2247], abs=1e-3)
    assert zscore([1.0, 1.0]) == [0.0, 0.0]
    minmax = MixedReward([{"function": "tests.rewards.test_mix_and_protocol:constant"}], normalize="minmax")
    assert minmax.score(["p"] * 3, ["a", "abc", "abcde"], [{}] * 3).scores == [0.0, 0.5, 1.0]


def test_mix_by_config_name_and_bad_entries():
    mix = build_reward("mix", {"rewards": [{"function": "arithmetic"}, {"function": "format", "weight": 0.5}]})
    out = mix.score(["1+1="], ["2"], [{"answer": "2", "stopped": True}])
    assert out.scores == [1.1 + 0.5 * 0.0]
    with pytest.raises(ValueError, match="function"):
        MixedReward([{"weight": 1.0}])
    with pytest.raises(ValueError, match="unique"):
        MixedReward([{"function": "length"}, {"function": "length"}])


def test_raising_and_hanging_async_rewards_are_named():
    class Raises:
        async def score(self, p, r, m):
            raise ZeroDivisionError("boom")

    class Hangs:
        async def score(self, p, r, m):
            await asyncio.sleep(3)

    with pytest.raises(RewardError, match=r"reward 'raiser' raised ZeroDivisionError: boom"):
        RewardRole(Raises(), "raiser").score(["p"], ["r"], [{}])
    with pytest.raises(RewardError, match=r"reward 'hanger' did not return within 0.2s"):
        RewardRole(Hangs(), "hanger", timeout_seconds=0.2).score(["p"], ["r"], [{}])


@pytest.mark.parametrize("text, answer, marked", [
    ("so \\boxed{\\frac{1}{2}} done", "\\frac{1}{2}", True),
    ("<answer> 42 </answer>", "42", True),
    ("it is 3 then 17", "17", False),
    ("nothing", None, False),
])
def test_extract_final_answer(text, answer, marked):
    assert extract_final_answer(text) == (answer, marked)


def test_math_fallback_exact_and_numeric():
    assert fallback_match("0.5", "1/2") and fallback_match("$12$", "12") and fallback_match("1,000", "1000")
    assert not fallback_match("0.51", "1/2")
    reward = MathAnswerReward(use_math_verify=False, format_weight=0.1)
    out = reward.score(["q"] * 3, ["\\boxed{0.5}", "x = 2", "\\boxed{3}"], [{"answer": "1/2"}, {"answer": "2"}, {"answer": "4"}])
    assert out.scores == [1.1, 1.0, 0.1]
    assert out.components["correct"] == [1.0, 1.0, 0.0]


def test_math_verify_equivalent_expressions():
    pytest.importorskip("math_verify", reason="math-verify is an optional extra (pip install 'rlxf[math]')")
    reward = MathAnswerReward()
    out = reward.score(["q"] * 3, ["\\boxed{\\frac{2}{4}}", "\\boxed{\\sqrt{4}}", "\\boxed{x+1}"],
                       [{"answer": "\\frac{1}{2}"}, {"answer": "2"}, {"answer": "1+x"}])
    assert out.components["correct"] == [1.0, 1.0, 1.0]
    assert reward.score(["q"], ["\\boxed{\\frac{1}{3}}"], [{"answer": "\\frac{1}{2}"}]).scores == [0.0]


def test_format_penalties():
    assert [overlong_fraction(n, 10, 4) for n in (5, 6, 8, 10, 12)] == [0.0, 0.0, 0.5, 1.0, 1.0]
    assert overlong_fraction(11, 10, 0) == 1.0 and overlong_fraction(99, None, 4) == 0.0
    reward = FormatReward(pattern=r"<answer>.*</answer>", format_weight=0.5, not_stopped_penalty=-1.0,
                          max_tokens=10, overlong_buffer=4, overlong_penalty=-2.0)
    rows = [{"stopped": True, "response_tokens": 5}, {"stopped": False, "response_tokens": 8}, {"stopped": True}]
    out = reward.score(["p"] * 3, ["<answer>1</answer>", "<answer>", "12345678"], rows)
    assert out.scores == [0.5, -1.0 - 1.0, -1.0]  # third: 8 characters -> half the over-length penalty
    assert out.components["not_stopped"] == [0.0, 1.0, 0.0] and out.components["overlong"] == [0.0, 0.5, 0.5]


def test_code_reward_is_registered():
    reward = build_reward("code_tests", {"mode": "all_pass"})
    out = reward.score(["p"], ["```python\nprint(int(input()) * 2)\n```"], [{"tests": [{"input": "4\n", "output": "8\n"}]}])
    assert out.scores == [1.0]
