"""benchmarks/judge_by_answer_form.py: the answer_judge held-out split with every rubric and answer form, each
pairwise row asked in both orders, scored per rubric and form."""

import sys
from pathlib import Path

import pytest

from rlxf.data.math_judge_rubrics import PAIRWISE

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import judge_by_answer_form as bench  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    return bench.held_out_rows(seed=0, eval_size=100)


def test_each_pairwise_row_is_followed_by_its_swapped_twin(rows):
    pairs = [r for r in rows if r["form"] == "pairwise"]
    assert len(pairs) % 2 == 0 and pairs
    for first, second in zip(pairs[::2], pairs[1::2]):
        assert (first["pair"], first["order"], second["pair"], second["order"]) == (first["pair"], 0, first["pair"], 1)
        assert second["responses"] == first["responses"][::-1]
        assert {first["label"], second["label"]} == {"A", "B"}
        assert second["prompt"] == PAIRWISE.format(prompt=first["question"], a=first["responses"][1],
                                                   b=first["responses"][0])
    assert len(rows) == 100 + len(pairs) // 2
    assert {r["answer_form"] for r in rows if r["form"] == "pointwise"} == set(bench.ANSWER_FORMS)


def test_a_judge_that_always_says_right_and_first_is_scored_by_hand(rows, monkeypatch):
    class AlwaysYesAndA:
        def __init__(self, *_, **__):
            pass

        def generate(self, prompts):
            return ["[[A]]" if "[[A]]" in p else "Score: 1" for p in prompts]

    monkeypatch.setattr(bench, "EngineJudge", AlwaysYesAndA)
    got = bench.measure("unused", rows, max_new_tokens=8)
    pointwise = [r for r in rows if r["form"] == "pointwise"]
    pairwise = [r for r in rows if r["form"] == "pairwise"]
    right = sum(r["label"] == 1 for r in pointwise) + sum(r["label"] == "A" for r in pairwise)
    assert got["accuracy"] == round(right / len(rows), 3) and got["unparseable"] == 0.0
    assert got["by_rubric"]["pairwise"] == 0.5  # each pair once right, once wrong
    assert got["pointwise_by_answer_form"]["unfinished"] == 0.0  # never right: it states no answer
    # always A: +1 on the rows whose right answer is B, 0 on the others; consistency 0 (A both ways)
    assert got["pairwise"] == {"position_bias": 0.5, "position_consistency": 0.0}
