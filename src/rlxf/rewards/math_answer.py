"""Math answers: ``math-verify`` equivalence (LaTeX, fractions, equivalent expressions) when installed,
else exact and numeric match.

The final answer of a response is the content of its last ``\\boxed{...}``, else of its last
``<answer>...</answer>`` tag, else its last number. ``metadata["answer"]`` is the reference.
Components: ``correct`` (1/0) and ``format`` (1 when the answer was marked with ``\\boxed`` or tags).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from fractions import Fraction

from rlxf.rewards.base import RewardOutput
from rlxf.rewards.registry import REWARDS

ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (nested braces balanced), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1: j]
    return None


def extract_final_answer(text: str) -> tuple[str | None, bool]:
    """(the final answer, whether it was explicitly marked by ``\\boxed`` or ``<answer>`` tags)."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip(), True
    tags = ANSWER_TAG.findall(text)
    if tags:
        return tags[-1].strip(), True
    numbers = NUMBER.findall(text)
    return (numbers[-1], False) if numbers else (None, False)


def _as_number(text: str) -> Fraction | None:
    cleaned = text.strip().strip("$").replace(",", "").replace(" ", "")
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


def fallback_match(predicted: str, reference: str, tolerance: float = 1e-6) -> bool:
    """Exact match up to spaces and ``$``, else numeric match (integers, decimals, ``a/b``)."""
    def norm(t: str) -> str:
        return t.replace(" ", "").strip("$").strip()

    if norm(predicted) == norm(reference):
        return True
    a, b = _as_number(predicted), _as_number(reference)
    return a is not None and b is not None and abs(float(a - b)) <= tolerance * max(1.0, abs(float(b)))


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> list:
    """math-verify's parse of ``$text$``, cached: a group's samples share a reference and often an answer
    (a parse costs ~0.1 ms; the result is only read by ``verify``)."""
    from math_verify import parse

    # Timeouts off: math-verify implements them with signals (main thread only); the reward role's
    # timeout bounds the whole call instead.
    return parse(f"${text}$", parsing_timeout=None)


def math_verify_match(predicted: str, reference: str) -> bool | None:
    """math-verify's verdict, or None when math-verify is not installed."""
    try:
        from math_verify import verify
    except ImportError:
        return None
    gold, pred = _parsed(reference), _parsed(predicted)
    return bool(gold and pred and verify(gold, pred, timeout_seconds=None))


def answers_match(predicted: str | None, reference: str, use_math_verify: bool = True) -> bool:
    if predicted is None:
        return False
    if fallback_match(predicted, str(reference)):
        return True
    if _as_number(predicted) is not None and _as_number(str(reference)) is not None:
        return False  # two plain numbers that differ: the exact comparison above is final
    return bool(use_math_verify and math_verify_match(predicted, str(reference)))


@REWARDS.register("math")
class MathAnswerReward:
    """score = correct_weight * [final answer equivalent to the reference] + format_weight * [marked]."""

    def __init__(self, correct_weight: float = 1.0, format_weight: float = 0.0, use_math_verify: bool = True) -> None:
        self.correct_weight = correct_weight
        self.format_weight = format_weight
        self.use_math_verify = use_math_verify

    def score(self, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict]) -> RewardOutput:
        correct, marked = [], []
        for response, row in zip(responses, metadata):
            answer, is_marked = extract_final_answer(response)
            correct.append(float(answers_match(answer, row["answer"], self.use_math_verify)))
            marked.append(float(is_marked))
        scores = [self.correct_weight * c + self.format_weight * f for c, f in zip(correct, marked)]
        return RewardOutput(scores=scores, components={"correct": correct, "format": marked})
