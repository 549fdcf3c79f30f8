"""The real-model judge's task: labels, near misses, the split it shares with the sums recipe, the verdict target
its reward reads, and the rubric the served judge is asked."""

import random
import re

import pytest

from rlxf.data.answer_judge_task import (
    ANSWER_FORMS,
    DEFAULT_FORMS,
    answer_judge_task,
    near_miss,
    pairwise_target,
    verdict_target,
)
from rlxf.data.arithmetic import arithmetic_task
from rlxf.data.math_judge_rubrics import PAIRWISE, RUBRICS, fill_rubric
from rlxf.data.tasks import TASKS
from rlxf.rewards.judge import JudgeReward
from rlxf.rewards.judge_agreement import JudgeAgreementReward

QUESTION = "What is {a} {op_word} {b}?"


@pytest.fixture(scope="module")
def splits():
    return TASKS.get("answer_judge")(seed=0, eval_size=100)


def test_verdict_target_works_the_sum_then_reads_the_answer_back():
    assert verdict_target(47, 8, 55) == "47 + 8 = 55. The answer says 55, which is correct. Score: 1"
    assert verdict_target(47, 8, 45) == "47 + 8 = 55. The answer says 45, which is wrong. Score: 0"


def test_near_miss_is_never_the_sum_nor_negative():
    rng = random.Random(0)
    for a in range(100):
        for b in range(10):
            claim = near_miss(a, b, rng)
            assert claim != a + b and claim >= 0
            assert claim - (a + b) in (1, -1, 10, -10)  # forgetting a carry of a 1-digit b is the sum - 10


def test_exactly_half_right_and_labels_match_the_claims(splits):
    assert (len(splits.train), len(splits.eval)) == (900, 100)
    for split in (splits.train, splits.eval):
        assert sum(row["label"] for row in split) == len(split) // 2
        for row in split:
            a, b = map(int, re.findall(r"\d+", row["question"]))
            assert row["answer"] == str(a + b)
            assert row["label"] == int(int(row["claim"]) == a + b)
            assert row["claim"] in row["response"] and row["answer_form"] in ANSWER_FORMS


def test_held_out_problems_are_the_sums_recipes(splits):
    recipe = arithmetic_task(0, 100, digits=2, ops="+", b_digits=1, question=QUESTION)
    assert [row["question"] for row in splits.eval] == [row["prompt"] for row in recipe.eval]
    assert not {row["question"] for row in splits.train} & {row["question"] for row in splits.eval}


ASKED: list = []


def recording_judge(prompts):
    ASKED.extend(prompts)
    return ["Score: 1"] * len(prompts)


def test_prompt_is_the_served_judges_rubric_filled_as_the_judge_reward_fills_it(splits):
    row = splits.eval[3]
    assert row["prompt"] == fill_rubric(RUBRICS["one_turn"], row["question"], row["response"], row["answer"])
    # RL asks the judge about a policy row (the sums recipe's: `prompt` the question) whose prompt the rollout
    # decodes with the chat template's system prompt and role names; prompt_from=row asks the question alone
    policy_row = {"prompt": row["question"], "answer": row["answer"]}
    decoded = f"system\nYou are a helpful AI assistant\nuser\n{row['question']}\nassistant\n"
    for source, question in (("row", row["question"]), ("rollout", decoded)):
        ASKED.clear()
        judge = JudgeReward(backend="tests.core.test_answer_judge_task:recording_judge", rubric=RUBRICS["reference"],
                            min_score=0, max_score=1, prompt_from=source)
        assert judge.score([decoded], [row["response"]], [policy_row]).scores == [1.0]
        assert ASKED == [fill_rubric(RUBRICS["reference"], question, row["response"], row["answer"])]


def test_prompt_from_row_reads_a_chat_rows_last_user_message_and_names_a_row_without_one():
    judge = JudgeReward(backend="tests.core.test_answer_judge_task:recording_judge", rubric="Q: {prompt} A: {response}",
                        min_score=0, max_score=1, prompt_from="row")
    chat = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "What is 2 plus 3?"}]}
    assert judge.judge_prompt("decoded", "5", chat) == "Q: What is 2 plus 3? A: 5"
    with pytest.raises(ValueError, match="prompt_from=row, but the row has no `prompt` text"):
        judge.judge_prompt("decoded", "5", {"answer": "5"})
    with pytest.raises(ValueError, match="unknown prompt_from 'question'"):
        JudgeReward(backend="tests.core.test_answer_judge_task:recording_judge", prompt_from="question")


def test_the_target_is_a_verdict_the_reward_reads_and_agrees_with(splits):
    rows = splits.train[:200]
    out = JudgeAgreementReward().score([r["prompt"] for r in rows], [r["sft_target"] for r in rows], rows)
    assert out.scores == [1.0] * len(rows)
    flipped = [r["sft_target"][:-1] + str(1 - r["label"]) for r in rows]
    assert JudgeAgreementReward().score([""] * len(rows), flipped, rows).scores == [0.0] * len(rows)


def test_same_seed_same_rows_and_answer_forms_restrict(splits):
    again = answer_judge_task(seed=0, eval_size=100)
    assert again.eval == splits.eval
    only = answer_judge_task(seed=0, eval_size=100, answer_forms=["equation"])
    assert {row["answer_form"] for row in only.train} == {"equation"}
    assert only.eval[0]["response"] == f"{only.eval[0]['question'].split()[2]} + " \
        f"{only.eval[0]['question'].split()[4].rstrip('?')} = {only.eval[0]['claim']}."


@pytest.mark.parametrize("kwargs, message", [
    ({"rubric": "solve_first"}, "rubric='solve_first'"),
    ({"answer_forms": ["haiku"]}, "answer_forms=['haiku']"),
    ({"ops": "*"}, "ops='*'"),
])
def test_refused_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        answer_judge_task(seed=0, eval_size=100, **kwargs)


def test_the_policy_recipe_asks_its_judge_the_rubric_the_judge_was_trained_on():
    from pathlib import Path

    import yaml

    recipes = Path(__file__).parents[2] / "recipes"
    judge = yaml.safe_load((recipes / "smollm2_grpo_judge.yaml").read_text())["reward"]["kwargs"]
    trained = yaml.safe_load((recipes / "smollm2_grm.yaml").read_text())["data"]["task_args"]["rubric"]
    assert judge["rubric"] == RUBRICS[trained] and judge["prompt_from"] == "row"


ALL_FORMS = list(ANSWER_FORMS)
# seed 0's first train answers as they were written before the decoy forms existed (commit ada609b)
FIRST_DEFAULT_RESPONSES = ["To add 0 and 0, we add the ones and then the tens, so the sum is 0.", "The answer is 2.",
                           "0 + 3 = 2.", "0 + 4 = 4."]


@pytest.fixture(scope="module")
def mixed():
    return answer_judge_task(seed=1, eval_size=100, rubric=["one_turn", "reference", "pairwise"], answer_forms=ALL_FORMS)


def test_pairwise_target_reads_both_answers_back_then_places_the_right_one():
    assert pairwise_target(47, 8, (54, 55)) == \
        "47 + 8 = 55. Answer A says 54, which is wrong. Answer B says 55, which is correct. [[B]]"
    assert pairwise_target(47, 8, (55, None)) == \
        "47 + 8 = 55. Answer A says 55, which is correct. Answer B gives no final answer, which is wrong. [[A]]"
    assert verdict_target(47, 8, None) == "47 + 8 = 55. The answer gives no final answer, which is wrong. Score: 0"


def test_a_rubric_list_gives_each_rubric_half_right_rows(mixed):
    for split in (mixed.train, mixed.eval):
        for name, right in (("one_turn", 1), ("reference", 1), ("pairwise", "A")):
            labels = [row["label"] for row in split if row["rubric"] == name]
            assert len(labels) > len(split) // 5
            assert sum(label == right for label in labels) == len(labels) // 2
    assert {row["form"] for row in mixed.train} == {"pointwise", "pairwise"}


def test_every_mixed_target_is_a_verdict_the_reward_reads_and_agrees_with(mixed):
    rows = mixed.train
    assert JudgeAgreementReward().score([""] * len(rows), [r["sft_target"] for r in rows], rows).scores == [1.0] * len(rows)


def test_pairwise_rows_hold_the_true_sum_in_the_labelled_place_and_a_wrong_answer_in_the_other(mixed):
    for row in (r for r in mixed.train if r["form"] == "pairwise"):
        place = "AB".index(row["label"])
        right, wrong = row["responses"][place], row["responses"][1 - place]
        truth = row["answer"]
        assert right.rstrip(".").endswith(truth)  # every form states its final answer last
        assert not wrong.rstrip(".").endswith(" " + truth) and not wrong.rstrip(".").endswith("= " + truth)
        assert row["prompt"] == PAIRWISE.format(prompt=row["question"], a=row["responses"][0], b=row["responses"][1])


def test_unfinished_answers_are_always_wrong_and_rambling_ones_name_the_truth_before_a_wrong_answer(mixed):
    pointwise = [r for r in mixed.train if r["form"] == "pointwise"]
    unfinished = [r for r in pointwise if r["answer_form"] == "unfinished"]
    rambling_wrong = [r for r in pointwise if r["answer_form"] == "rambling" and r["label"] == 0]
    assert unfinished and rambling_wrong
    assert all(r["label"] == 0 and r["claim"] == "" and r["response"].endswith("the answer is") for r in unfinished)
    for row in rambling_wrong:  # the hack of docs/rewards.md: the right number named, a wrong one answered
        assert f"is actually {row['answer']}," in row["response"] and row["response"].endswith(f"is {row['claim']}.")


def test_the_default_rows_are_the_measured_judges():
    # smollm2_grm.yaml's judge (0.97 held-out) was trained on these exact rows: the decoy forms must not move them
    rows = answer_judge_task(seed=0, eval_size=100).train
    assert [r["response"] for r in rows[:4]] == FIRST_DEFAULT_RESPONSES
    assert {r["answer_form"] for r in rows} == set(DEFAULT_FORMS)


def test_a_form_list_with_only_unanswered_forms_is_refused():
    with pytest.raises(ValueError, match="unfinished states no answer"):
        answer_judge_task(seed=0, eval_size=100, answer_forms=["unfinished"])
    with pytest.raises(ValueError, match=re.escape("rubric=['one_turn', 'solve_first']")):
        answer_judge_task(seed=0, eval_size=100, rubric=["one_turn", "solve_first"])
