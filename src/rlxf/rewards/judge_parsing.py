"""Reading a judge's verdict out of its text: one parser for the ``judge`` reward and for judge training.

A judge writes its rationale first, then its verdict:

* pointwise (one response): ``Score: N`` (also ``<score>N</score>``, ``[[N]]``, ``N/10``-style values);
* pairwise (responses A and B): ``[[A]]``, ``[[B]]`` or ``[[tie]]`` (MT-Bench's ``[[C]]`` is a tie too),
  or ``Verdict: A`` / ``Verdict: B`` / ``Verdict: tie``.

Several marks of the strongest form: ``conflicts="last"`` takes the last one (a judge that reconsiders),
``conflicts="reject"`` treats marks that disagree as unparseable (a judge being trained must not hedge by
writing both verdicts). Marks that agree are never a conflict.
"""

from __future__ import annotations

import re

_NUMBER = r"(-?\d+(?:\.\d+)?)(?:\s*/\s*(\d+(?:\.\d+)?))?"
SCORE_PATTERNS = (
    re.compile(r"<score>\s*" + _NUMBER + r"\s*</score>", re.IGNORECASE),
    re.compile(r"\[\[\s*" + _NUMBER + r"\s*\]\]"),
    re.compile(r"\bscore\s*[:=]?\s*\**\s*" + _NUMBER, re.IGNORECASE),
)
PAIRWISE_PATTERNS = (
    re.compile(r"\[\[\s*(A|B|C|tie)\s*\]\]", re.IGNORECASE),
    re.compile(r"\bverdict\s*[:=]\s*\**\s*(A|B|tie)\b", re.IGNORECASE),
)
PAIRWISE_VERDICTS = {"a": "A", "b": "B", "c": "tie", "tie": "tie"}
CONFLICT_RULES = ("last", "reject")


def _strongest_marks(text: str | None, patterns: tuple[re.Pattern, ...]) -> list:
    """Every match of the first pattern that occurs in ``text`` (empty when none does)."""
    for pattern in patterns:
        matches = pattern.findall(text or "")
        if matches:
            return matches
    return []


def _pick(values: list, conflicts: str):
    if conflicts not in CONFLICT_RULES:
        raise ValueError(f"judge verdict: conflicts must be one of {CONFLICT_RULES}, got {conflicts!r}")
    if not values or (conflicts == "reject" and len(set(values)) > 1):
        return None
    return values[-1]


def _score_value(mark: tuple[str, str], max_score: float) -> float | None:
    value, denominator = mark
    if not denominator:
        return float(value)
    return None if float(denominator) == 0 else float(value) / float(denominator) * max_score


def parse_judge_score(
    text: str | None, min_score: float = 0.0, max_score: float = 10.0, conflicts: str = "last"
) -> float | None:
    """The judge's score, or None when missing, unparseable, out of ``[min_score, max_score]`` or (with
    ``conflicts="reject"``) contradicted by another mark. ``7/10`` is rescaled to the range's top."""
    values = [_score_value(mark, max_score) for mark in _strongest_marks(text, SCORE_PATTERNS)]
    score = _pick(values, conflicts)
    return score if score is not None and min_score <= score <= max_score else None


def parse_pairwise_verdict(text: str | None, conflicts: str = "last") -> str | None:
    """``"A"``, ``"B"``, ``"tie"``, or None when the reply has no (consistent) pairwise verdict."""
    return _pick([PAIRWISE_VERDICTS[m.lower()] for m in _strongest_marks(text, PAIRWISE_PATTERNS)], conflicts)
