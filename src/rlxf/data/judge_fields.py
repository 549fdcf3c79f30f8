"""What a judge rubric's ``{reference}`` holds for a task row, in one place: the ``judge`` reward fills it
(rewards/judge.py) and the rubrics a judge is trained on fill it the same way (data/math_judge_rubrics.py), so a
trained judge is asked exactly what it learned on."""

from __future__ import annotations

REFERENCE = "Reference answer: {answer}\n"


def reference_text(row: dict) -> str:
    """The reference line for a row with an ``answer``; empty for a row without one."""
    return REFERENCE.format(answer=row["answer"]) if "answer" in row else ""
