"""Judge training's verdicts and reward: the shared parser on hand-made replies (malformed, missing, several
verdicts, ties), the agreement reward and format penalty, and position bias over both orders of a pair."""

import pytest

from rlxf.rewards.judge_agreement import JudgeAgreementReward, position_report
from rlxf.rewards.judge_parsing import parse_judge_score, parse_pairwise_verdict
from rlxf.rewards.registry import build_reward


@pytest.mark.parametrize("text, conflicts, expected", [
    ("7+8=15 sum 355 Score: 1", "reject", 1.0),
    ("Score: 1 ... Score: 1", "reject", 1.0),      # marks that agree are no conflict
    ("Score: 0 ... Score: 1", "reject", None),     # a hedge: both verdicts
    ("Score: 0 ... Score: 1", "last", 1.0),        # the judge reward's rule: the last mark counts
    ("sum 355 Score:", "reject", None),            # missing number
    ("sum 355", "reject", None),                   # missing verdict
    ("Score: 2", "reject", None),                  # out of [0, 1]
])
def test_pointwise_score_with_conflict_rules(text, conflicts, expected):
    assert parse_judge_score(text, 0, 1, conflicts=conflicts) == expected


@pytest.mark.parametrize("text, conflicts, expected", [
    ("sum 355 [[A]]", "reject", "A"),
    ("sum 355 [[b]]", "reject", "B"),
    ("sum 355 [[tie]]", "reject", "tie"),
    ("sum 355 [[C]]", "reject", "tie"),           # MT-Bench's tie
    ("rationale. Verdict: tie", "reject", "tie"),
    ("Verdict: A", "reject", "A"),
    ("[[A]] no, [[B]]", "reject", None),
    ("[[A]] no, [[B]]", "last", "B"),
    ("[[A]] then Verdict: B", "reject", "A"),     # the bracket form is the stronger one
    ("[[D]]", "reject", None),
    ("A is better", "reject", None),
    (None, "last", None),
])
def test_pairwise_verdicts(text, conflicts, expected):
    assert parse_pairwise_verdict(text, conflicts=conflicts) == expected


def test_unknown_conflict_rule_is_named():
    with pytest.raises(ValueError, match="conflicts must be one of"):
        parse_pairwise_verdict("[[A]]", conflicts="first")


def test_agreement_reward_pointwise_and_pairwise():
    reward = build_reward("judge_agreement", {"format_penalty": 0.5})
    rows = [{"form": "pointwise", "label": 1}, {"form": "pointwise", "label": 1},
            {"form": "pointwise", "label": 0}, {"form": "pointwise", "label": 0},
            {"form": "pairwise", "label": "tie"}, {"form": "pairwise", "label": "B"},
            {"form": "pairwise", "label": "B"}, {"form": "pairwise", "label": "A"}]
    replies = ["sum 355 Score: 1", "sum 345 Score: 0", "Score: 0 Score: 1", "no verdict",
               "sum 13 [[tie]]", "sum 13 [[A]]", "[[tie]] [[B]]", "sum 13 [[A]]"]
    out = reward.score([""] * 8, replies, rows)
    assert out.scores == [1.0, 0.0, -0.5, -0.5, 1.0, 0.0, -0.5, 1.0]
    assert out.components["correct"] == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    assert out.components["malformed"] == [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    # says A where the label is B: +1; says A where it is A: 0; pointwise rows: 0
    assert out.components["first_bias"] == [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]


def test_pointwise_reads_a_ten_point_scale_at_its_midpoint():
    reward = JudgeAgreementReward(min_score=0, max_score=10)
    out = reward.score(["", "", ""], ["Score: 5", "Score: 4", "Score: 10"],
                       [{"form": "pointwise", "label": 1}, {"form": "pointwise", "label": 0},
                        {"form": "pointwise", "label": 0}])
    assert out.scores == [1.0, 1.0, 0.0]


def test_unknown_form_names_the_row():
    with pytest.raises(ValueError, match="form 'ranking'"):
        JudgeAgreementReward().score([""], ["[[A]]"], [{"form": "ranking", "label": "A"}])


PAIRS = [  # one pair in both orders per problem: the true sum first, then second; and a tie
    {"pair": "347+8", "order": 0, "label": "A"}, {"pair": "347+8", "order": 1, "label": "B"},
    {"pair": "20+3", "order": 0, "label": "tie"}, {"pair": "20+3", "order": 1, "label": "tie"},
]


def test_position_report_of_a_fair_judge():
    assert position_report(["A", "B", "tie", "tie"], PAIRS) == {"position_bias": 0.0, "position_consistency": 1.0}


def test_position_report_of_a_judge_that_always_picks_a():
    # says A 4 times where the label is A once: bias (4 - 1) / 4; no pair survives the swap
    assert position_report(["A", "A", "A", "A"], PAIRS) == {"position_bias": 0.75, "position_consistency": 0.0}


def test_position_report_counts_unparseable_as_inconsistent_and_out_of_the_bias():
    # the parsed rows: A where A (0), B where B (0), tie where tie (0): no bias; the 20+3 pair is inconsistent
    assert position_report(["A", "B", None, "tie"], PAIRS) == {"position_bias": 0.0, "position_consistency": 0.5}
    # A on both rows of 347+8 (labels A, B), nothing parsed on 20+3: ((1 - 1) + (1 - 0)) / 2
    assert position_report(["A", "A", None, None], PAIRS) == {"position_bias": 0.5, "position_consistency": 0.0}


def test_position_report_with_no_parsed_verdict_has_no_bias():
    assert position_report([None] * 4, PAIRS) == {"position_bias": None, "position_consistency": 0.0}


def test_position_report_needs_both_orders():
    with pytest.raises(ValueError, match="both orders"):
        position_report(["A"], PAIRS[:1])
