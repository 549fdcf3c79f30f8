"""maj@k: the answer most of ``k`` samples give, judged right or wrong.

With ``n`` samples of a problem, maj@k is the mean over the ``n // k`` disjoint blocks of ``k``
consecutive samples (each block is an independent draw of k samples) of whether the block's majority
answer is correct. A sample whose answer could not be extracted (None) does not vote; a block with no
votes is wrong. Ties go to the answer reached first in the block (the usual first-seen rule). The
majority answer is as correct as the samples that gave it (every sample with one answer gets the same
verdict from a deterministic verifier; the first is used).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence


def majority_correct(answers: Sequence[str | None], correct: Sequence[float]) -> float:
    """1.0 when the most common answer among ``answers`` is a correct one, else 0.0."""
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return 0.0
    top = max(votes.values())
    winner = next(a for a in answers if a is not None and votes[a] == top)  # first-seen among the tied
    return float(correct[answers.index(winner)] > 0)


def maj_at_k(answers: Sequence[str | None], correct: Sequence[float], k: int) -> float:
    """maj@k of one problem from its ``n`` sampled ``answers`` and their ``correct`` flags."""
    n = len(answers)
    if len(correct) != n:
        raise ValueError(f"maj_at_k needs one correct flag per answer, got {len(correct)} for {n}")
    if not 1 <= k <= n:
        raise ValueError(f"maj_at_k needs 1 <= k <= n, got n={n}, k={k}")
    blocks = [range(start, start + k) for start in range(0, n - k + 1, k)]
    return sum(majority_correct([answers[i] for i in b], [correct[i] for i in b]) for b in blocks) / len(blocks)
