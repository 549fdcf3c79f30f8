"""Inference-time scaling of a judge: k sampled judgments of one response combined into one score.

``mean`` averages the parsed scores, ``vote`` takes the most common one (a tie between modes: their
mean). The spread (standard deviation of the k scores on the [0, 1] scale) is the judge's uncertainty:
0 when every sample agrees. Unparseable or failed samples are left out; none usable gives None.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence


def majority_vote(values: Sequence[float]) -> float:
    counts = Counter(values)
    top = max(counts.values())
    return statistics.fmean(v for v, c in counts.items() if c == top)


JUDGE_AGGREGATES: dict[str, Callable[[Sequence[float]], float]] = {"mean": statistics.fmean, "vote": majority_vote}


def combine_samples(scores: Sequence[float | None], aggregate: str) -> tuple[float | None, float]:
    """(the combined score or None, the spread) of one response's sampled scores."""
    usable = [s for s in scores if s is not None]
    if not usable:
        return None, 0.0
    return JUDGE_AGGREGATES[aggregate](usable), statistics.pstdev(usable)
