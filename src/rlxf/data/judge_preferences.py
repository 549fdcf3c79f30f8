"""Judge training from preference labels: a human's (the studio's export) or any preference file's.

    data:
      task: preference_judge
      path: runs/studio-exports/1-helpful.jsonl     # rows: prompt (or messages), chosen, rejected
    reward: {function: judge_agreement}

Each pair becomes a pairwise judge prompt (``form: pairwise``) whose ``label`` is the letter of the preferred
response, so ``judge_agreement`` rewards the judge for siding with the labeller. Training rows show each pair
once, the chosen response first or second by a seeded coin (a judge must not learn "A wins"); held-out rows
show every pair in both orders (``pair``, ``order``), so ``position_report`` measures position bias. The
held-out split is ``preference_file``'s (``eval_path``, else the file's last ``eval_size`` pairs).

Labels carry no rationale to imitate, so there is no ``sft_target``: train with GRPO (``sft.steps: 0``) from
a model that already writes verdicts. ``protocol: solve_first`` asks the judge to answer the prompt itself
before it is shown the responses (two scripted turns, ``turns``: run it with the ``simulated_user``
environment, ``scored: last``, and serve it with the same two turns as the ``judge`` reward's rubric), the
protocol that kept a trained arithmetic judge from being anchored by the claims it grades (docs/rewards.md).
"""

from __future__ import annotations

import random

from rlxf.data.files import split_files
from rlxf.data.preferences import normalise_pair, read_preference_rows
from rlxf.data.tasks import TASKS, TaskSplits

ONE_TURN = ("Which response to the prompt is better?\nPrompt: {prompt}\nResponse A: {first}\nResponse B: {second}\n"
            "Explain briefly, then end with [[A]] or [[B]].\n")
SOLVE_FIRST = ("Answer this prompt yourself first, briefly:\n{prompt}\n",
               "Two responses to it.\nResponse A: {first}\nResponse B: {second}\n"
               "Which is better? Explain briefly, then end with [[A]] or [[B]].\n")


def prompt_text(row: dict) -> str:
    """The prompt as the judge reads it: the text, or a chat's turns as ``role: content`` lines."""
    if "prompt" in row:
        return row["prompt"]
    return "\n".join(f"{m['role']}: {m['content']}" for m in row["messages"])


def one_turn(fields: dict, template: str) -> dict:
    return {"prompt": template.format(**fields)}


def solve_first(fields: dict, template: str) -> dict:
    ask, show = (turn.format(**fields) for turn in SOLVE_FIRST)
    return {"prompt": ask, "turns": [{"user": ask}, {"user": show}]}


PROTOCOLS = {"one_turn": one_turn, "solve_first": solve_first}  # as in data/judge_task.py


def judge_rows(pair_id: str, row: dict, orders: list[int], template: str, protocol: str) -> list[dict]:
    meta, chosen, rejected = normalise_pair(row, f"pair {pair_id}")
    out = []
    for order in orders:
        first, second = (chosen, rejected) if order == 0 else (rejected, chosen)
        shown = PROTOCOLS[protocol]({"prompt": prompt_text(meta), "first": first, "second": second}, template)
        out.append({**shown, "form": "pairwise", "label": "A" if order == 0 else "B", "pair": pair_id, "order": order})
    return out


@TASKS.register("preference_judge")
def preference_judge_task(seed: int, eval_size: int, path: str, eval_path: str | None = None,
                          protocol: str = "one_turn", template: str = ONE_TURN) -> TaskSplits:
    """``template`` (one turn) has ``{prompt}``, ``{first}``, ``{second}``."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"preference_judge task: unknown protocol {protocol!r}; known: {sorted(PROTOCOLS)}")
    pairs = split_files(read_preference_rows, path, eval_path, eval_size)
    coin = random.Random(seed)
    train = [r for i, row in enumerate(pairs.train)
             for r in judge_rows(f"train-{i}", row, [coin.randrange(2)], template, protocol)]
    held_out = [r for i, row in enumerate(pairs.eval) for r in judge_rows(f"eval-{i}", row, [0, 1], template, protocol)]
    return TaskSplits(train=train, eval=held_out)
