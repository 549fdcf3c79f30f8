"""Preference data: row shapes, file errors naming file:line, the pair batch's masks, and the pairs
built from the arithmetic task."""

import json

import pytest
import torch

from rlxf.data.arithmetic import arithmetic_task
from rlxf.data.files import DatasetError
from rlxf.data.preferences import (
    arithmetic_preferences,
    normalise_pair,
    pair_batch,
    preference_file,
)
from rlxf.data.wrong_answers import (
    any_number,
    carry_flipped,
    near_miss,
    one_digit_changed,
    one_digit_more_or_less,
    teacher_mistake,
    wrong_answer_picker,
)


def test_pair_batch_masks_prompts_and_marks_chosen_then_rejected(tokenizer):
    rows = [{"prompt": "12+3=", "chosen": "15", "rejected": "1"}, {"prompt": "1+1=", "chosen": "2", "rejected": "11"}]
    batch = pair_batch(rows, tokenizer, chat_template=False, max_prompt_tokens=32)
    eos = tokenizer.eos_token_id
    # rows 0-1 chosen, 2-3 rejected; prompts left-padded and never in the loss
    assert batch.prompt_mask.tolist() == [[1] * 5, [0, 1, 1, 1, 1], [1] * 5, [0, 1, 1, 1, 1]]
    assert batch.loss_mask.tolist() == [[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 1, 1]]
    decoded = [tokenizer.decode(r[m.bool()]) for r, m in zip(batch.response_ids, batch.loss_mask)]
    assert decoded == ["15</s>", "2</s>", "1</s>", "11</s>"]
    assert all(batch.response_ids[i, int(batch.loss_mask[i].sum()) - 1] == eos for i in range(4))
    assert torch.equal(batch.prompt_ids[:2], batch.prompt_ids[2:])


def test_the_three_row_shapes():
    chat = [{"role": "user", "content": "hi"}]
    assert normalise_pair({"prompt": "p", "chosen": "a", "rejected": "b", "answer": 1}) == (
        {"prompt": "p", "answer": 1}, "a", "b")
    assert normalise_pair({"messages": chat, "chosen": "a", "rejected": "b"}) == ({"messages": chat}, "a", "b")
    whole = {"chosen": chat + [{"role": "assistant", "content": "a"}],
             "rejected": chat + [{"role": "assistant", "content": "b"}]}
    assert normalise_pair(whole) == ({"messages": chat}, "a", "b")


def test_chat_pairs_tokenise_through_the_template(tokenizer):
    chat = [{"role": "user", "content": "hi"}]
    batch = pair_batch([{"messages": chat, "chosen": "yo", "rejected": "no"}], tokenizer, False, 64)
    assert tokenizer.decode(batch.prompt_ids[0]) == "user: hi\nassistant: "
    assert tokenizer.decode(batch.response_ids[1, :2]) == "no"


@pytest.mark.parametrize("row, message", [
    ({"prompt": "p", "chosen": "a"}, "needs `chosen` and `rejected`"),
    ({"chosen": "a", "rejected": "b"}, "need a `prompt`"),
    ({"prompt": "p", "chosen": "a", "rejected": [{"role": "assistant", "content": "b"}]}, "both be text or both"),
    ({"chosen": [{"role": "user", "content": "x"}], "rejected": [{"role": "user", "content": "y"}]}, "end with an assistant"),
])
def test_bad_rows_are_named(tmp_path, row, message):
    path = tmp_path / "prefs.jsonl"
    good = {"prompt": "p", "chosen": "a", "rejected": "b"}
    path.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(DatasetError, match=f"{path}:2: .*{message}"):
        preference_file(seed=0, eval_size=1, path=str(path))


def test_preference_file_splits_and_reads_parquet(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = [{"prompt": f"{i}+0=", "chosen": str(i), "rejected": str(i + 1)} for i in range(5)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "p.parquet")
    splits = preference_file(seed=0, eval_size=2, path=str(tmp_path / "p.parquet"))
    assert splits.train == rows[:3] and splits.eval == rows[3:]


def test_arithmetic_pairs_reject_the_no_carry_or_an_off_by_one_answer():
    splits = arithmetic_preferences(seed=0, eval_size=20, digits=2, b_digits=1)
    plain = arithmetic_task(seed=0, eval_size=20, digits=2, b_digits=1)
    assert [r["prompt"] for r in splits.eval] == [r["prompt"] for r in plain.eval]  # same held-out problems
    for row in splits.train + splits.eval:
        a, b = (int(x) for x in row["prompt"][:-1].split("+"))
        assert row["chosen"] == row["answer"] == str(a + b)
        assert row["rejected"] != row["chosen"]
    carry = next(r for r in splits.train if r["prompt"] == "47+8=")
    assert carry["rejected"] == "45"  # the sloppy teacher's answer
    import random

    assert teacher_mistake(12, 3, random.Random(0)) in ("14", "16")  # no carry: off by one


def test_carry_flipped_drops_a_carry_or_adds_one():
    import random

    rng = random.Random(0)
    assert carry_flipped(47, 8, rng) == "45"  # 55 carries: the teacher's no-carry sum
    assert carry_flipped(999, 9, rng) == "998"  # 1008: every carry dropped
    assert carry_flipped(520, 3, rng) == "533"  # 523 does not carry: a spurious carry into the tens
    assert carry_flipped(0, 0, rng) == "10"


def test_the_near_kind_moves_one_digit_of_the_sum_by_one():
    import random

    rng = random.Random(0)
    assert {near_miss(347, 8, rng) for _ in range(200)} == {"455", "255", "365", "345", "356", "354"}  # 355
    assert {near_miss(95, 5, rng) for _ in range(200)} == {"200", "110", "190", "101", "109"}  # 100: never "000"


def _one_deletion_apart(short: str, long: str) -> bool:
    return len(long) == len(short) + 1 and any(long[:i] + long[i + 1:] == short for i in range(len(long)))


@pytest.mark.parametrize("a,b", [(0, 0), (5, 5), (99, 1), (487, 1), (905, 5), (999, 9)])
def test_each_wrong_answer_kind_is_wrong_in_its_own_way(a, b):
    import random

    rng, truth = random.Random(a * 10 + b), str(a + b)
    for _ in range(30):
        digit = one_digit_changed(a, b, rng)
        assert len(digit) == len(truth) and sum(x != y for x, y in zip(digit, truth)) == 1
        assert digit == "0" or not digit.startswith("0")
        length = one_digit_more_or_less(a, b, rng)
        assert _one_deletion_apart(truth, length) or _one_deletion_apart(length, truth)
        assert length == "0" or not length.startswith("0")
        guess = any_number(a, b, rng)
        assert guess != truth and 0 <= int(guess) < 10 ** (len(truth) + 1)
    assert {one_digit_more_or_less(0, 0, random.Random(seed)) for seed in range(50)} == {f"{d}0" for d in range(1, 10)}


def test_rejected_mixes_the_kinds_by_weight_and_keeps_the_default_pairs():
    mixed = arithmetic_preferences(seed=0, eval_size=20, digits=2, b_digits=1, rejected={"length": 3, "digit": 1})
    default = arithmetic_preferences(seed=0, eval_size=20, digits=2, b_digits=1)
    assert default.train == arithmetic_preferences(seed=0, eval_size=20, digits=2, b_digits=1,
                                                   rejected={"teacher": 1}).train
    rows = mixed.train
    assert len(rows) == 980 and all(r["rejected"] != r["chosen"] for r in rows)  # 100 x 10 problems, 20 held out
    other_length = sum(len(r["rejected"]) != len(r["chosen"]) for r in rows) / len(rows)
    assert 0.6 <= other_length <= 0.9  # 3 of 4 drawn as `length`; `digit` keeps the length
    assert [r["prompt"] for r in mixed.eval] == [r["prompt"] for r in default.eval]


@pytest.mark.parametrize("weights,message", [({"digits": 1}, "unknown wrong-answer kind 'digits'; known: .*digit"),
                                             ({"digit": 0}, "positive weight"), ({}, "positive weight")])
def test_rejected_refuses_unknown_kinds_and_bad_weights(weights, message):
    import random

    with pytest.raises(ValueError, match=f"arithmetic_preferences: rejected: .*{message}"):
        wrong_answer_picker(weights, random.Random(0))
