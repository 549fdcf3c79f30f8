"""pass@k against values computed by hand from 1 - C(n-c, k) / C(n, k)."""

from __future__ import annotations

from math import comb

import pytest

from rlxf.eval.pass_at_k import mean_pass_at_k, pass_at_k


def test_hand_computed_values():
    # n=5, c=2, k=1: 1 - C(3,1)/C(5,1) = 1 - 3/5 = 0.4 (= c/n)
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    # n=10, c=1, k=5: 1 - C(9,5)/C(10,5) = 1 - 126/252 = 0.5
    assert pass_at_k(10, 1, 5) == pytest.approx(0.5)
    # n=4, c=3, k=2: n-c=1 < k, so always a correct one
    assert pass_at_k(4, 3, 2) == 1.0
    assert pass_at_k(7, 0, 3) == 0.0
    assert pass_at_k(3, 3, 3) == 1.0


def test_matches_the_binomial_form_for_large_n():
    for n, c, k in [(200, 13, 1), (200, 13, 10), (200, 13, 100), (1000, 1, 500)]:
        exact = 1 - comb(n - c, k) / comb(n, k)
        assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-9, abs=1e-12)


def test_mean_over_problems_and_bad_arguments():
    assert mean_pass_at_k([5, 10], [2, 1], 1) == pytest.approx((0.4 + 0.1) / 2)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError):
        mean_pass_at_k([], [], 1)
