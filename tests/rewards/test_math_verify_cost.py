"""The math reward's cost cuts: two plain numbers are compared exactly without math-verify, and
math-verify's parse of a text is done once."""

import pytest

from rlxf.rewards.math_answer import _parsed, answers_match
from rlxf.rewards.registry import build_reward

pytest.importorskip("math_verify")


def test_differing_plain_numbers_never_reach_math_verify():
    _parsed.cache_clear()
    assert answers_match("7", "8") is False
    assert answers_match("1,000", "1000") is True
    assert answers_match("0.5", "1/2") is True
    assert _parsed.cache_info().misses == 0
    assert answers_match("\\frac{1}{2}", "0.5") is True  # LaTeX still goes to math-verify
    assert _parsed.cache_info().misses == 2


def test_a_groups_shared_reference_is_parsed_once():
    _parsed.cache_clear()
    responses = ["\\boxed{\\frac{2}{4}}", "\\boxed{\\dfrac{1}{2}}", "\\boxed{\\frac{2}{4}}", "\\boxed{\\frac{1}{3}}"]
    out = build_reward("math").score([""] * 4, responses, [{"answer": "\\frac{1}{2}"}] * 4)
    assert out.components["correct"] == [1.0, 1.0, 1.0, 0.0]
    info = _parsed.cache_info()
    assert (info.misses, info.hits) == (4, 4)  # the reference and three distinct answers; the rest reused
