"""The reasoning-gym scorer: the dataset's own verdicts, with the scorer looked up once per dataset."""

import pytest

from rlxf.rewards.reasoning_gym import ReasoningGymReward, score_answer_fn

rg = pytest.importorskip("reasoning_gym")


def test_scores_are_the_datasets_own_and_the_lookup_is_cached():
    entries = list(rg.create_dataset("spell_backward", size=3, seed=1))
    assert [e["answer"] for e in entries] == ["ainomma", "talps", "reyornac"]
    sums = list(rg.create_dataset("basic_arithmetic", size=2, seed=1))
    assert [e["answer"] for e in sums] == ["-4", "3"]
    rows = [{"rg_entry": e} for e in entries * 20 + sums]
    responses = ["ainomma", "<answer> talps </answer>", "reyorn"] * 20 + ["-4", "4"]
    score_answer_fn.cache_clear()
    out = ReasoningGymReward().score([""] * len(rows), responses, rows)
    assert out.scores[:3] == [1.0, 1.0, pytest.approx(0.0, abs=0.99)]  # a wrong spelling scores below 1
    assert out.components["correct"] == [1.0, 1.0, 0.0] * 20 + [1.0, 0.0]
    assert out.scores[-2:] == [1.0, 0.0]
    info = score_answer_fn.cache_info()
    assert (info.misses, info.hits) == (2, 60)  # one build per dataset, not one per sample
