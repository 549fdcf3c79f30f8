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
    wrong_answer,
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

    assert wrong_answer(12, 3, random.Random(0)) in ("14", "16")  # no carry: off by one
