"""A paired comparison of two checkpoints evaluated on the same problems (``rlxf eval`` with two models).

Which problems each solves greedily (only the first, only the second, both, neither), and for the
greedy accuracy, the sampled accuracy (pass@1), the mean reward and pass@k / maj@k at the largest k:
the difference second - first with its paired bootstrap interval and the sign test's p-value.
"""

from __future__ import annotations

from rlxf.eval.intervals import paired_difference


def compare_checkpoints(first: list[dict], second: list[dict], ks: list[int], seed: int = 0) -> dict:
    if [p["problem"] for p in first] != [p["problem"] for p in second]:
        raise ValueError("the two checkpoints were evaluated on different problems")
    a = {p["problem"] for p in first if p["greedy_correct"]}
    b = {p["problem"] for p in second if p["greedy_correct"]}
    k = max(ks)
    metrics = dict.fromkeys(["greedy_correct", "pass@1", "mean_reward", f"pass@{k}", f"maj@{k}"])
    return {
        "greedy_solved": {"only_first": sorted(a - b), "only_second": sorted(b - a), "both": len(a & b),
                          "neither": len(first) - len(a | b)},
        "difference_second_minus_first": {
            ("greedy_accuracy" if m == "greedy_correct" else m): paired_difference(
                [p[m] for p in first], [p[m] for p in second], seed)
            for m in metrics if m in first[0]
        },
    }
