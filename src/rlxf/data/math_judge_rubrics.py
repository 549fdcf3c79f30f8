"""The plain-words judge rubrics for the real-model recipe's sums, in one place: what ``answer_judge`` trains a
judge on and what ``benchmarks/judge_over_server.py`` asks a served judge, so the two prompts cannot drift.

Each rubric is filled as the ``judge`` reward fills it (``rewards/judge.py``, ``judge_prompt``): ``{prompt}`` the
question, ``{response}`` the answer, ``{reference}`` the reference line of ``data/judge_fields.py`` with the true
answer. ``solve_first`` is two turns (one user message each); the others are one message. The judge explains,
then ends with ``Score: 1`` or ``Score: 0`` (``min_score: 0``, ``max_score: 1``).
"""

from __future__ import annotations

from rlxf.data.judge_fields import reference_text

VERDICT = "Explain briefly, then end with 'Score: 1' if the answer is correct or 'Score: 0' if it is wrong."
RUBRICS: dict[str, str | list[str]] = {
    "one_turn": "Here is a math question and an answer to it.\nQuestion: {prompt}\nAnswer: {response}\n"
                "Is the answer correct? " + VERDICT,
    "solve_first": ["Solve this math question yourself first, step by step: {prompt}",
                    "Now grade this answer to it: {response}\nIs the answer correct? " + VERDICT],
    "reference": "Here is a math question, its reference answer and an answer to grade.\nQuestion: {prompt}\n"
                 "{reference}Answer: {response}\nIs the answer correct? " + VERDICT,
}
PAIRWISE = ("Here is a math question and two answers to it.\nQuestion: {prompt}\nAnswer A: {a}\nAnswer B: {b}\n"
            "Which answer is correct? Explain briefly, then end with [[A]], [[B]] or [[tie]].")
# the near misses of a sum the policy might write: off by one in the units or the tens
NEAR_MISSES = (1, -1, 10, -10)


def fill_rubric(rubric: str, question: str, answer: str, truth: str) -> str:
    """A one-message rubric filled as the ``judge`` reward fills it for a row whose ``answer`` is ``truth``."""
    return rubric.format(prompt=question, response=answer, reference=reference_text({"answer": truth}))
