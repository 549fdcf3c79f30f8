"""The judge-training task: digit rationales, labels, the sloppy teacher, held-out pairs in both orders."""

import random

import pytest

from rlxf.data.arithmetic import add_without_carry, addends
from rlxf.data.judge_task import (
    RATIONALES,
    aligned_rationale,
    arithmetic_judge_task,
    digit_rationale,
    echo_rationale,
    echo_until_mismatch,
    marked_columns,
    pairwise_verdict,
    sum_then_columns,
    wrong_candidate,
)
from rlxf.data.wrong_answers import one_digit_off_by_one
from rlxf.rewards.judge_agreement import JudgeAgreementReward


@pytest.mark.parametrize("a, b, forget, expected", [
    (347, 8, False, ("7+8=15 4+0+1=5 3+0=3 sum 355", 355)),
    (347, 8, True, ("7+8=15 4+0=4 3+0=3 sum 345", 345)),
    (999, 9, False, ("9+9=18 9+0+1=10 9+0+1=10 0+0+1=1 sum 1008", 1008)),
    (0, 0, False, ("0+0=0 sum 0", 0)),
])
def test_digit_rationale(a, b, forget, expected):
    assert digit_rationale(a, b, forget_carries=forget) == expected


@pytest.mark.parametrize("mine, claims, expected", [
    ("345", ["355"], "3=3 4!5 5=5"),
    ("1008", ["108"], "1=1 0=0 0!8 8!_"),  # a shorter claim runs out: `_`
    ("27", ["22", "57"], "2=2!5 7!2=7"),  # pairwise: against A, then B
])
def test_marked_columns(mine, claims, expected):
    assert marked_columns(mine, claims) == expected


def test_column_rationales_against_a_claim():
    assert aligned_rationale(347, 8, [345]) == ("5=5 5!4 3=3", 355)  # from the right
    assert sum_then_columns(347, 8, [355], forget_carries=True) == ("sum 345 vs 3=3 4!5 5=5", 345)
    assert sum_then_columns(999, 9, [1008]) == ("sum 1008 vs 1=1 0=0 0=0 8=8", 1008)


@pytest.mark.parametrize("mine, claim, expected", [
    ("355", "355", "355="),
    ("355", "345", "3!5"),  # the claim's digits while they agree, then the judge's own digit
    ("355", "255", "!3"),
    ("355", "35", "35!5"),  # the claim ends first
    ("355", "3551", "355!_"),  # the judge's number ends first
])
def test_echo_until_mismatch(mine, claim, expected):
    assert echo_until_mismatch(mine, claim) == expected


def test_echo_rationale_pointwise_and_pairwise():
    assert echo_rationale(347, 8, [345]) == ("3!5", 355)
    assert echo_rationale(347, 8, [355], forget_carries=True) == ("3!4", 345)
    assert echo_rationale(347, 8, [355, 345]) == ("A 355= B 3!5", 355)


@pytest.mark.parametrize("a, b, claims, forget, expected", [
    (347, 8, [355], False, ("553=", 355)),  # units first: the claim's digits reversed while they agree
    (347, 8, [345], False, ("5!5", 355)),  # units agree, the tens (the forgotten carry) do not
    (347, 8, [356], False, ("!5", 355)),  # off by one in the units: caught at the first character
    (347, 8, [355], True, ("5!4", 345)),  # the sloppy teacher forgets the carry into the tens
    (999, 9, [1008, 108], False, ("A 8001= B 80!0", 1008)),  # pairwise; B ends first: the judge's digit
    (90, 5, [950], False, ("!5", 95)),  # a claim one digit too long differs at once from the right
])
def test_units_first_echo(a, b, claims, forget, expected):
    assert RATIONALES["echo_right"](a, b, claims, forget) == expected


@pytest.mark.parametrize("name, claims, expected", [
    ("sum_echo", [345], "sum 355 vs 3!5"),
    ("sum_echo", [356], "sum 355 vs 35!5"),
    ("sum_echo_right", [355], "sum 553 vs 553="),  # the sum from the right, then the claim read the same way
    ("sum_echo_right", [356], "sum 553 vs !5"),
    ("sum_echo_right", [355, 345], "sum 553 vs A 553= B 5!5"),
])
def test_sum_then_echo(name, claims, expected):
    assert RATIONALES[name](347, 8, claims) == (expected, 355)
    assert RATIONALES[name](347, 8, [355], True)[0].startswith("sum 345" if name == "sum_echo" else "sum 543")


def test_wrong_candidates_are_wrong():
    rng = random.Random(0)
    assert all(wrong_candidate(a, b, rng) != a + b for a in range(0, 1000, 7) for b in range(10))


@pytest.mark.parametrize("first, second, expected", [(355, 345, "A"), (345, 355, "B"), (345, 354, "tie")])
def test_pairwise_verdict(first, second, expected):
    assert pairwise_verdict(first, second, truth=355) == expected


@pytest.mark.parametrize("protocol", ["one_turn", "solve_first"])
@pytest.mark.parametrize("rationale", sorted(RATIONALES))
@pytest.mark.parametrize("form", ["pointwise", "pairwise"])
def test_labels_are_true_and_an_honest_teacher_agrees_with_them(form, rationale, protocol):
    splits = arithmetic_judge_task(seed=0, eval_size=50, form=form, digits=2, b_digits=1, rationale=rationale,
                                   protocol=protocol)
    reward = JudgeAgreementReward()
    rows = splits.train + splits.eval
    out = reward.score([r["prompt"] for r in rows], [r["sft_target"] for r in rows], rows)
    assert out.components["correct"] == [1.0] * len(rows)
    if form == "pointwise" and rationale == "columns":  # the claim is copied beside the worked-out sum, then the verdict
        assert all(r["sft_target"].endswith(f"sum {sum(map(int, r['question'][:-1].split('+')))} vs {r['claim']} Score: {r['label']}")
                   for r in rows)


def test_sloppy_teacher_misjudges_only_carrying_problems():
    splits = arithmetic_judge_task(seed=0, eval_size=50, digits=2, b_digits=1, sloppy_teacher=1.0)
    out = JudgeAgreementReward().score([""] * len(splits.train), [r["sft_target"] for r in splits.train], splits.train)
    wrong = [r for r, c in zip(splits.train, out.components["correct"]) if c == 0]
    assert len(wrong) > 100
    for row in wrong:  # each misjudged claim was worked out without carries, on a problem that carries
        a, b = (int(x) for x in row["prompt"].split()[1].split("=")[0].split("+"))
        assert add_without_carry(a, b) != a + b and f"sum {add_without_carry(a, b)} " in row["sft_target"]


def test_held_out_problems_stay_out_of_training_and_pairs_come_in_both_orders():
    splits = arithmetic_judge_task(seed=0, eval_size=50, form="pairwise", digits=2, b_digits=1)
    train_problems = {r["prompt"].split()[1] for r in splits.train}
    assert len(splits.eval) == 100 and not train_problems & {r["pair"] + "=" for r in splits.eval}
    first, second = splits.eval[0], splits.eval[1]
    assert first["pair"] == second["pair"] and (first["order"], second["order"]) == (0, 1)
    a_b = first["prompt"].split(" A:")[1].rstrip("\n").split(" B:")
    assert second["prompt"].endswith(f"A:{a_b[1]} B:{a_b[0]}\n")


def test_unknown_form_and_rationale_are_named():
    with pytest.raises(ValueError, match="unknown form 'listwise'"):
        arithmetic_judge_task(seed=0, eval_size=10, form="listwise")
    with pytest.raises(ValueError, match="unknown rationale 'vibes'"):
        arithmetic_judge_task(seed=0, eval_size=10, rationale="vibes")


def test_units_near_miss_changes_only_training_claims():
    plain = arithmetic_judge_task(seed=0, eval_size=50, digits=2, b_digits=1, rationale="echo")
    near = arithmetic_judge_task(seed=0, eval_size=50, digits=2, b_digits=1, rationale="echo", units_near_miss=0.5)
    assert near.eval == plain.eval
    changed = [r for r, p in zip(near.train, plain.train) if r != p]
    assert 0.4 < len(changed) / len(near.train) < 0.6
    for row in changed:
        a, b = (int(x) for x in row["question"][:-1].split("+"))
        off = int(row["claim"]) - (a + b)  # off by one or two (floored at 0 for the smallest sums)
        assert row["label"] == 0 and (off in (-2, -1, 1, 2) or (row["claim"] == "0" and a + b in (1, 2)))


@pytest.mark.parametrize("truth, expected", [
    (355, {255, 455, 345, 365, 354, 356}),
    (10, {11, 19, 20}),  # the units wrap (0 -> 9); the leading 1 never becomes 0
    (9, {8, 0}),  # a one-digit sum may become 0
])
def test_one_digit_off_by_one_reaches_every_digit_and_nothing_else(truth, expected):
    rng = random.Random(0)
    assert {one_digit_off_by_one(truth, rng) for _ in range(200)} == expected


def test_near_miss_share_swaps_only_wrong_training_claims_for_near_misses():
    plain = arithmetic_judge_task(seed=0, eval_size=50, digits=2, b_digits=1, rationale="echo_right")
    near = arithmetic_judge_task(seed=0, eval_size=50, digits=2, b_digits=1, rationale="echo_right", near_miss_share=0.5)
    assert near.eval == plain.eval
    assert [r["label"] for r in near.train] == [r["label"] for r in plain.train]  # right claims stay one half
    changed = [r for r, p in zip(near.train, plain.train) if r != p]
    wrong = sum(r["label"] == 0 for r in plain.train)
    assert 0.4 < len(changed) / wrong < 0.6
    for row in changed:  # one digit of the true sum, one up or down (9 <-> 0)
        truth = str(sum(int(x) for x in row["question"][:-1].split("+")))
        assert len(row["claim"]) == len(truth)
        diffs = [(int(c) - int(t)) % 10 for c, t in zip(row["claim"], truth) if c != t]
        assert len(diffs) == 1 and diffs[0] in (1, 9)


def test_solve_first_rows_hold_the_question_then_the_claim_in_two_turns():
    splits = arithmetic_judge_task(seed=0, eval_size=50, digits=3, b_digits=1, rationale="echo", protocol="solve_first")
    one_turn = arithmetic_judge_task(seed=0, eval_size=50, digits=3, b_digits=1, rationale="echo")
    assert [r["label"] for r in splits.eval] == [r["label"] for r in one_turn.eval]  # the same claims
    for row, same in zip(splits.eval, one_turn.eval):
        assert row["claim"] == same["claim"] and row["prompt"] == f"check {row['question']}\n"
        assert row["turns"] == [{"user": f"check {row['question']}\n"}, {"user": f"claim {row['claim']}\n"}]
        # the judge's own sum, end of turn, the claim (shown by the environment), then the one-turn working
        truth = sum(map(int, row["question"][:-1].split("+")))
        assert row["sft_target"] == f"{truth}</s>claim {row['claim']}\n{same['sft_target']}"


def test_solve_first_by_hand():
    from rlxf.data.judge_task import solve_first
    assert solve_first("pointwise", "347+8=", "345", 355, "3!5 Score: 0") == {
        "prompt": "check 347+8=\n", "turns": [{"user": "check 347+8=\n"}, {"user": "claim 345\n"}],
        "sft_target": "355</s>claim 345\n3!5 Score: 0"}
    assert solve_first("pairwise", "347+8=", "A:355 B:345", 345, "A 3!4 B 345= [[B]]", eos="<|im_end|>") == {
        "prompt": "compare 347+8=\n", "turns": [{"user": "compare 347+8=\n"}, {"user": "A:355 B:345\n"}],
        "sft_target": "345<|im_end|>A:355 B:345\nA 3!4 B 345= [[B]]"}


def test_solve_first_sloppy_teacher_answers_without_carries_in_its_first_turn():
    splits = arithmetic_judge_task(seed=0, eval_size=50, digits=2, b_digits=1, sloppy_teacher=1.0, rationale="echo",
                                   protocol="solve_first")
    for row in splits.train:
        a, b = addends(row["question"])
        assert row["sft_target"].startswith(f"{add_without_carry(a, b)}</s>claim {row['claim']}\n")


def test_unknown_protocol_is_named():
    with pytest.raises(ValueError, match="unknown protocol 'telepathy'"):
        arithmetic_judge_task(seed=0, eval_size=10, protocol="telepathy")
