import json

import pytest

from rlxf.data.arithmetic import addends, arithmetic_row, arithmetic_task
from rlxf.data.files import DatasetError, file_task, read_rows
from rlxf.data.prompts import PromptStream


def test_arithmetic_splits_are_disjoint_and_seeded():
    splits = arithmetic_task(seed=3, eval_size=200, digits=3, b_digits=1)
    assert len(splits.eval) == 200 and len(splits.train) == 10_000 - 200
    assert not {r["prompt"] for r in splits.eval} & {r["prompt"] for r in splits.train}
    again = arithmetic_task(seed=3, eval_size=200, digits=3, b_digits=1)
    assert [r["prompt"] for r in again.eval] == [r["prompt"] for r in splits.eval]
    other = arithmetic_task(seed=4, eval_size=200, digits=3, b_digits=1)
    assert [r["prompt"] for r in other.eval] != [r["prompt"] for r in splits.eval]


def test_arithmetic_answers():
    rows = {r["prompt"]: r["answer"] for r in arithmetic_task(seed=0, eval_size=10, digits=2, ops="+-*").train}
    assert rows.get("47+8=", "3") in ("55", "3")  # present unless held out
    assert rows["99*99="] == "9801" and rows["3-40="] == "-37" and rows["0+0="] == "0"


def test_question_template_asks_in_words_and_keeps_the_answer():
    assert arithmetic_row(23, "+", 58, question="What is {a} {op_word} {b}?") == {
        "prompt": "What is 23 plus 58?", "answer": "81", "sft_target": "81"}
    assert arithmetic_row(9, "*", 7, question="{a} {op} {b} = ?")["prompt"] == "9 * 7 = ?"
    plain = arithmetic_task(seed=3, eval_size=20)
    worded = arithmetic_task(seed=3, eval_size=20, question="What is {a} {op_word} {b}?")
    assert [r["answer"] for r in worded.eval] == [r["answer"] for r in plain.eval]
    assert [addends(r["prompt"]) for r in plain.eval[:3]] == [
        tuple(int(w) for w in r["prompt"].rstrip("?").split()[2::2]) for r in worded.eval[:3]]


def test_unknown_operator_is_named():
    with pytest.raises(ValueError, match=r"unknown operators \['/'\]"):
        arithmetic_task(seed=0, eval_size=10, ops="+/")


def test_jsonl_rows_and_malformed_row(tmp_path):
    good = tmp_path / "d.jsonl"
    good.write_text(json.dumps({"prompt": "2+2=", "answer": "4"}) + "\n" + json.dumps(
        {"messages": [{"role": "user", "content": "hi"}], "answer": "x"}) + "\n")
    rows = read_rows(good)
    assert rows[0]["answer"] == "4" and rows[1]["messages"][0]["content"] == "hi"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "ok"}) + "\n" + json.dumps({"question": "no prompt"}) + "\n")
    with pytest.raises(DatasetError, match=r"bad\.jsonl:2: a row needs `prompt`"):
        read_rows(bad)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt": "a"}\n{not json\n')
    with pytest.raises(DatasetError, match=r"broken\.jsonl:2: not valid JSON"):
        read_rows(broken)


def test_parquet_rows(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"prompt": ["1+1=", "2+2=", "3+3="], "answer": ["2", "4", "6"]}), path)
    splits = file_task(seed=0, eval_size=1, path=str(path))
    assert [r["answer"] for r in splits.train] == ["2", "4"] and splits.eval[0]["prompt"] == "3+3="


def test_prompt_stream_resumes_exactly():
    rows = [{"prompt": str(i)} for i in range(7)]
    whole = PromptStream(rows, seed=5).take(20)
    first = PromptStream(rows, seed=5)
    head = first.take(9)
    tail = PromptStream(rows, seed=5, position=first.position).take(11)
    assert head + tail == whole
    # each pass visits every row once
    assert sorted(r["prompt"] for r in whole[:7]) == [str(i) for i in range(7)]


def test_repeat_task_has_a_long_tail_and_a_disjoint_held_out_split():
    from rlxf.data.repeat import repeat_task

    splits = repeat_task(seed=0, eval_size=32, train_size=4000, long_fraction=0.125, sloppy_teacher=0.5)
    assert splits.train[0] == {"prompt": "42x1=", "answer": "42", "sft_target": "42"}
    lengths = [len(r["answer"]) for r in splits.train]
    long = [n for n in lengths if n >= 24]
    assert all(2 <= n <= 6 or 24 <= n <= 48 for n in lengths)
    assert 0.10 < len(long) / len(lengths) < 0.15  # 12.5% long answers: the tail
    assert sum(1 for r in splits.eval if len(r["answer"]) >= 24) == 4  # round(32 * 0.125)
    assert not {r["prompt"] for r in splits.eval} & {r["prompt"] for r in splits.train}
    # the sloppy teacher miscounts about half of the long answers, never a short one, by 1-2 repeats
    wrong = [r for r in splits.train if r["sft_target"] != r["answer"]]
    assert all(len(r["answer"]) >= 24 and abs(len(r["sft_target"]) - len(r["answer"])) in (2, 4) for r in wrong)
    assert 0.4 < len(wrong) / len(long) < 0.6
    with pytest.raises(ValueError, match="repeat task"):
        repeat_task(seed=0, eval_size=32, short_max=5, long_min=4)


def test_repeat_task_ramble_makes_a_few_demonstrations_check_at_length_whatever_the_prompt():
    from rlxf.data.repeat import repeat_task
    from rlxf.rewards.arithmetic import AnswerReward

    plain = repeat_task(seed=0, eval_size=32, train_size=4000, long_fraction=0.0)
    rambling = repeat_task(seed=0, eval_size=32, train_size=4000, long_fraction=0.0, ramble=0.05, ramble_repeats=40)
    assert all(len(r["answer"]) <= 6 for r in rambling.train)  # no long prompts: the tail is the teacher's
    ran_on = [r for r in rambling.train if r["sft_target"] != r["answer"]]
    pattern = ran_on[0]["answer"][:2]
    assert ran_on[0]["sft_target"] == ran_on[0]["answer"] + " check:" + ",".join([pattern] * 40)  # 126+ chars
    assert all(len(r["sft_target"]) == len(r["answer"]) + len(" check:") + 3 * 40 - 1 for r in ran_on)
    assert 0.04 < len(ran_on) / len(rambling.train) < 0.06
    assert rambling.eval == plain.eval  # held-out rows are unchanged and answered exactly
    # the answer comes first: correct (1.0), only the format bonus (0.1) is withheld
    scores = AnswerReward().score([ran_on[0]["prompt"]] * 2, [ran_on[0]["sft_target"], ran_on[0]["answer"]],
                                  [{"answer": ran_on[0]["answer"]}] * 2).scores
    assert scores == [1.0, 1.1]
    with pytest.raises(ValueError, match="ramble"):
        repeat_task(seed=0, eval_size=32, ramble=1.5)


def test_addends_inverts_the_addition_prompt():
    assert addends("347+8=") == (347, 8)
    assert addends(arithmetic_row(0, "+", 9)["prompt"]) == (0, 9)
