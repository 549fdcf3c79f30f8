"""A trained judge's held-out verdicts, by rubric and by how the answer is written, with its pairwise position
bias: the ``answer_judge`` task's held-out split (data/answer_judge_task.py) asked of one or more judges.

    python benchmarks/judge_by_answer_form.py --judge one_rubric=runs/grm_s0/checkpoints/step_000000/policy \\
        --judge mixed=runs/grm_mix_s0/checkpoints/step_000000/policy [--seed 0] [--eval-size 100]

The split is the task's with every rubric it trains (``one_turn``, ``reference``, ``pairwise``) and every answer
form (the policy's ``47 + 8 = 55.``, prose, and the two a gamed policy writes: ``rambling``, the true sum named
before a wrong final answer, and ``unfinished``, no final answer at all), whatever the judge was trained on, so
judges trained on less are measured on the same rows. Each pairwise row is asked in both orders (its responses
swapped, the label with them) for the position bias (> 0: favours A) and consistency of
``rewards/judge_agreement.position_report``. Greedy, on the built-in engine in this process (the ``judge``
reward's ``engine`` backend), one judge after the other. Prints JSON.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from common import emit  # noqa: E402
from rlxf.data.answer_judge_task import ANSWER_FORMS, TRAINABLE_RUBRICS, answer_judge_task  # noqa: E402
from rlxf.data.math_judge_rubrics import PAIRWISE  # noqa: E402
from rlxf.rewards.judge_agreement import SWAPPED, JudgeAgreementReward, position_report  # noqa: E402
from rlxf.rewards.judge_backends import EngineJudge  # noqa: E402


def held_out_rows(seed: int, eval_size: int) -> list[dict]:
    """The task's held-out split over all rubrics and forms; each pairwise row followed by its swapped twin."""
    split = answer_judge_task(seed=seed, eval_size=eval_size, rubric=list(TRAINABLE_RUBRICS),
                              answer_forms=list(ANSWER_FORMS)).eval
    rows = []
    for i, row in enumerate(split):
        if row["form"] != "pairwise":
            rows.append(row)
            continue
        first, second = row["responses"]
        rows.append({**row, "pair": str(i), "order": 0})
        rows.append({**row, "prompt": PAIRWISE.format(prompt=row["question"], a=second, b=first),
                     "label": SWAPPED[row["label"]], "responses": [second, first], "pair": str(i), "order": 1})
    return rows


def share(flags: list[bool]) -> float:
    return round(sum(flags) / len(flags), 3)


def measure(folder: str, rows: list[dict], max_new_tokens: int) -> dict:
    judge = EngineJudge(folder, max_new_tokens=max_new_tokens)
    start = time.perf_counter()
    replies = judge.generate([row["prompt"] for row in rows])
    seconds = time.perf_counter() - start
    reader = JudgeAgreementReward()
    verdicts = [reader.verdict(reply, row) for reply, row in zip(replies, rows)]
    right = [v is not None and v == row["label"] for v, row in zip(verdicts, rows)]
    by_rubric, by_form = defaultdict(list), defaultdict(list)
    for ok, row in zip(right, rows):
        by_rubric[row["rubric"]].append(ok)
        if row["form"] == "pointwise":
            by_form[row["answer_form"]].append(ok)
    pairs = [(v, row) for v, row in zip(verdicts, rows) if row["form"] == "pairwise"]
    wrong_examples = [{"asked": row.get("response") or row["responses"], "reply": reply}
                      for ok, reply, row in zip(right, replies, rows) if not ok][:4]
    return {"accuracy": share(right), "unparseable": share([v is None for v in verdicts]),
            "by_rubric": {name: share(flags) for name, flags in sorted(by_rubric.items())},
            "pointwise_by_answer_form": {name: share(flags) for name, flags in sorted(by_form.items())},
            "pairwise": position_report([v for v, _ in pairs], [row for _, row in pairs]),
            "judged_s": round(seconds, 1), "wrong_examples": wrong_examples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--judge", action="append", required=True, help="NAME=FOLDER (repeatable)")
    parser.add_argument("--seed", type=int, default=0, help="the task's seed: its split and answers")
    parser.add_argument("--eval-size", type=int, default=100)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    rows = held_out_rows(args.seed, args.eval_size)
    result = {"benchmark": "judge_by_answer_form", "seed": args.seed, "rows": len(rows),
              "rows_by_rubric": {name: sum(r["rubric"] == name for r in rows) for name in TRAINABLE_RUBRICS},
              "judges": {}}
    for spec in args.judge:
        name, _, folder = spec.partition("=")
        if not folder:
            parser.error(f"--judge {spec!r}: write NAME=FOLDER")
        result["judges"][name] = {"folder": folder, **measure(folder, rows, args.max_new_tokens)}
    emit(result)


if __name__ == "__main__":
    main()
