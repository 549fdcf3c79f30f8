"""maj@k, the answer extraction it votes with, and the intervals / paired tests, against hand-computed values."""

import pytest

from rlxf.eval.answers import answer_extractor
from rlxf.eval.intervals import bootstrap_interval, paired_difference, sign_test
from rlxf.eval.majority import maj_at_k
from rlxf.eval.verdicts import solved_flags
from rlxf.rewards.base import RewardOutput


def test_maj_at_k_of_one_problem_by_hand():
    answers, correct = ["3", "5", "3", "4"], [1, 0, 1, 0]
    assert maj_at_k(answers, correct, 4) == 1.0  # "3" twice
    assert maj_at_k(answers, correct, 2) == 1.0  # [3,5] and [3,4]: ties go to the first-seen "3"
    assert maj_at_k(answers, correct, 1) == 0.5  # maj@1 is the sampled accuracy


def test_maj_at_k_counts_disjoint_blocks_and_ignores_missing_answers():
    answers, correct = ["5", "5", "3", None, "3", "3"], [0, 0, 1, 0, 1, 1]
    assert maj_at_k(answers, correct, 6) == 1.0  # 3 votes for "3", 2 for "5"
    assert maj_at_k(answers, correct, 3) == 0.5  # [5,5,3] -> 5 wrong; [None,3,3] -> 3 right
    assert maj_at_k(answers, correct, 4) == 0.0  # one block [5,5,3,None] -> 5; the last 2 samples unused
    assert maj_at_k(answers, correct, 2) == pytest.approx(2 / 3)  # [5,5] wrong, [3,None] right, [3,3] right
    assert maj_at_k([None, None], [0, 0], 2) == 0.0


def test_maj_at_k_rejects_bad_arguments():
    with pytest.raises(ValueError, match="1 <= k <= n"):
        maj_at_k(["1"], [1], 2)
    with pytest.raises(ValueError, match="one correct flag per answer"):
        maj_at_k(["1", "2"], [1], 1)


def test_answer_extraction_is_the_tasks():
    assert answer_extractor("arithmetic")(" 12 apples, not 13") == "12"
    assert answer_extractor("math")(r"so \boxed{7/2} it is") == "7/2"
    assert answer_extractor("reasoning_gym")("think <answer> B </answer>") == "B"
    assert answer_extractor("code_tests")("Here:\n```python\ndef f(x):\n    return x\n```") == "def f(x): return x"
    assert answer_extractor("tests.core.helpers:length_reward")("  a \n b ") == "a b"  # no entry: the text
    assert answer_extractor("arithmetic")("no digits") is None


def test_sign_test_exact_p_values():
    assert sign_test([1, 1, 1, 1, 1]) == 2 / 32
    assert sign_test([1] * 10 + [-1]) == 2 * (1 + 11) / 2**11
    assert sign_test([1, -1, 0, 0]) == 1.0  # zeros are ties, dropped
    assert sign_test([0, 0]) == 1.0


def test_bootstrap_interval_brackets_the_mean():
    assert bootstrap_interval([0.5] * 10) == (0.5, 0.5)
    low, high = bootstrap_interval([0.0, 1.0] * 50)  # standard error 0.05: about 0.40 .. 0.60
    assert low == pytest.approx(0.40, abs=0.02) and high == pytest.approx(0.60, abs=0.02)
    assert bootstrap_interval([0.0, 1.0] * 50, seed=3) == bootstrap_interval([0.0, 1.0] * 50, seed=3)


def test_paired_difference_is_second_minus_first():
    out = paired_difference([0, 0, 1, 1], [1, 1, 1, 0])
    assert out["mean"] == 0.25 and out["better"] == 2 and out["worse"] == 1
    assert out["sign_test_p"] == 1.0  # 2 up, 1 down of 3: p = 2 * (1 + 3) / 8, capped at 1
    assert out["low"] <= 0.25 <= out["high"]
    with pytest.raises(ValueError, match="same problems"):
        paired_difference([1, 0], [1])


def test_verdict_is_correct_then_all_tests_passed_then_a_positive_score():
    assert solved_flags(RewardOutput([1.1, 0.1], {"format": [1, 1], "correct": [1.0, 0.0]})) == [1.0, 0.0]
    code = RewardOutput([1.0, 2 / 3, 0.0], {"pass_fraction": [1.0, 2 / 3, 0.0], "sandbox_error": [0, 0, 1]})
    assert solved_flags(code) == [1.0, 0.0, 0.0]  # partial credit is not a solve
    assert solved_flags(RewardOutput([3.0, 0.0, -1.0])) == [1.0, 0.0, 0.0]
