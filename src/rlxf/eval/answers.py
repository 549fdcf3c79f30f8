"""The task's answer extraction, for majority voting: which text of a response is its answer.

Keyed by the reward that scores the task (the reward already knows how its task's answers are written):
``ANSWER_EXTRACTORS[name]`` is a dotted path to ``extract(response) -> str | None`` (None: no answer,
which never wins a vote). A reward without an entry (a custom ``module:attr``, a judge) votes on the
whole response with its whitespace collapsed. Adding a task's extraction is one line here.
"""

from __future__ import annotations

from collections.abc import Callable

from rlxf.rewards.registry import import_object

ANSWER_EXTRACTORS: dict[str, str] = {
    "arithmetic": "rlxf.rewards.arithmetic:extract_answer",  # the first integer
    "math": "rlxf.eval.answers:math_final_answer",  # \boxed{...}, <answer> tags, else the last number
    "reasoning_gym": "rlxf.rewards.reasoning_gym:reasoning_gym_answer",  # <answer> tags, else the text
    "code_tests": "rlxf.eval.answers:program_text",  # the program (fenced block), whitespace collapsed
}


def normalized_text(response: str) -> str | None:
    text = " ".join(response.split())
    return text or None


def math_final_answer(response: str) -> str | None:
    from rlxf.rewards.math_answer import extract_final_answer

    return extract_final_answer(response)[0]


def program_text(response: str) -> str | None:
    from rlxf.rewards.code_reward import extract_program

    return normalized_text(extract_program(response))


def answer_extractor(reward_name: str) -> Callable[[str], str | None]:
    """The extraction of the task scored by ``reward_name`` (the recipe's ``eval.reward`` or ``reward``)."""
    path = ANSWER_EXTRACTORS.get(reward_name)
    return import_object(path) if path else normalized_text
