"""The unbiased pass@k estimator (Chen et al. 2021, "Evaluating Large Language Models Trained on Code").

With ``n`` samples of a problem of which ``c`` are correct, the probability that at least one of ``k``
samples drawn without replacement is correct is ``1 - C(n-c, k) / C(n, k)``. Computed as a running
product so that large ``n`` does not overflow.
"""

from __future__ import annotations

from collections.abc import Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem: ``n`` samples, ``c`` of them correct, ``1 <= k <= n``."""
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:  # every draw of k contains a correct sample
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):  # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
        miss *= 1.0 - k / i
    return 1.0 - miss


def mean_pass_at_k(samples: Sequence[int], correct: Sequence[int], k: int) -> float:
    """Mean pass@k over problems, each with its own sample count and correct count."""
    if len(samples) != len(correct) or not samples:
        raise ValueError("mean_pass_at_k needs one (samples, correct) pair per problem, at least one")
    return sum(pass_at_k(n, c, k) for n, c in zip(samples, correct, strict=True)) / len(samples)
