"""benchmarks/sampled_preference_pairs.py: which samples make pairs, and the edited wrong sums it adds
(recipes/data/smollm2_sums_pairs*.jsonl were written by it)."""

import random
import sys
from pathlib import Path

from rlxf.rewards.registry import build_reward

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from sampled_preference_pairs import edited_negatives, pairs_of  # noqa: E402


def test_pairs_join_higher_to_lower_scores_each_sample_once():
    samples = [("a", 1.0), ("b", 0.0), ("c", 0.0), ("a", 1.0), ("d", 1.0), ("e", 0.5)]
    pairs = pairs_of(samples, limit=5, rng=random.Random(0))
    assert all(sc > sr for _, _, sc, sr in pairs)
    used = [t for c, r, _, _ in pairs for t in (c, r)]
    assert len(used) == len(set(used)) and len(pairs) == 2  # 5 distinct texts: two disjoint pairs at most
    assert pairs_of([("x", 1.0), ("y", 1.0), ("x", 1.0)], 3, random.Random(0)) == []  # all alike: none
    assert len(pairs_of(samples, limit=1, rng=random.Random(0))) == 1


def test_edited_negatives_change_only_the_stated_sum_and_score_lower():
    reward = build_reward("math")
    rows = [{"prompt": "What is 47 plus 8?", "chosen": "47 + 8 = 55. So 55.", "rejected": "It is 12.",
             "answer": "55", "scores": [1.0, 0.0]},
            {"prompt": "What is 47 plus 8?", "chosen": "47 + 8 = 55. So 55.", "rejected": "No idea",
             "answer": "55", "scores": [1.0, 0.0]},  # the same chosen twice: edited once
            {"prompt": "What is 3 plus 4?", "chosen": "Seven.", "rejected": "8", "answer": "7", "scores": [1.0, 0.0]}]
    edited = edited_negatives(rows, per_pair=3, reward=reward, seed=0)
    assert edited and {r["prompt"] for r in edited} == {"What is 47 plus 8?"}  # "Seven." states no number
    for row in edited:
        assert row["chosen"] == "47 + 8 = 55. So 55." and row["edited"] is True
        head, wrong = row["rejected"][:len("47 + 8 = 55. So ")], row["rejected"][len("47 + 8 = 55. So "):-1]
        assert head == "47 + 8 = 55. So " and wrong.isdigit() and wrong != "55"  # only the last 55 changed
        assert row["scores"] == [1.0, 0.0]
    assert len(edited) <= 3 and len({r["rejected"] for r in edited}) == len(edited)
