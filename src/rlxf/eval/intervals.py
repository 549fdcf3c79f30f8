"""Confidence intervals over problems, and paired tests between two checkpoints on the same problems.

Every reported metric is a mean over problems of a per-problem value (1/0 greedy correctness, pass@k,
maj@k, mean reward), so one percentile bootstrap over problems gives each its interval; the paired
bootstrap resamples problems once for both checkpoints, so problem difficulty cancels out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

RESAMPLES = 2000
CONFIDENCE = 0.95


def bootstrap_interval(values: Sequence[float], seed: int = 0, resamples: int = RESAMPLES,
                       confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The percentile bootstrap interval of ``mean(values)`` (resampling the problems)."""
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        raise ValueError("bootstrap_interval needs at least one value")
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def mean_with_interval(values: Sequence[float], seed: int = 0) -> dict[str, float]:
    low, high = bootstrap_interval(values, seed)
    return {"mean": float(np.mean(values)), "low": low, "high": high}


def sign_test(differences: Sequence[float]) -> float:
    """Exact two-sided sign test p-value of per-problem ``differences`` (ties, zeros, are dropped)."""
    ups = sum(d > 0 for d in differences)
    downs = sum(d < 0 for d in differences)
    m = ups + downs
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, i) for i in range(min(ups, downs) + 1)) / 2**m
    return min(1.0, 2 * tail)


def paired_difference(first: Sequence[float], second: Sequence[float], seed: int = 0) -> dict[str, float]:
    """``second - first`` on the same problems: mean difference, its paired bootstrap interval, and the
    sign test's p-value."""
    if len(first) != len(second):
        raise ValueError(f"a paired comparison needs the same problems: {len(first)} vs {len(second)} values")
    diffs = [b - a for a, b in zip(first, second)]
    return {**mean_with_interval(diffs, seed), "sign_test_p": sign_test(diffs),
            "better": sum(d > 0 for d in diffs), "worse": sum(d < 0 for d in diffs)}
