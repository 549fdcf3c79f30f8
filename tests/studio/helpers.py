"""Shared by the studio tests: arithmetic pairs, a judge that knows arithmetic, a labeller that does too."""

from __future__ import annotations

import json
import re
from pathlib import Path

ARITHMETIC_PAIRS = [  # (a, b, right, wrong)
    (17, 5, "22", "12"), (48, 3, "51", "41"), (9, 9, "18", "8"), (123, 7, "130", "120"),
    (56, 6, "62", "52"), (88, 4, "92", "82"), (5, 5, "10", "0"), (34, 8, "42", "32"),
]


def pair_rows(pairs=ARITHMETIC_PAIRS) -> list[dict]:
    return [{"prompt": f"{a}+{b}=", "answer": right, "chosen": right, "rejected": wrong} for a, b, right, wrong in pairs]


def pairs_jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text(pairs_jsonl(rows))
    return path


def true_sum(prompt: str) -> int:
    a, b = (int(x) for x in re.findall(r"\d+", prompt)[:2])
    return a + b


def arithmetic_verdict(prompt: str, left: str, right: str) -> str:
    """What a careful labeller says about a shown pair: the correct sum is better."""
    truth = str(true_sum(prompt))
    if (left.strip() == truth) == (right.strip() == truth):
        return "tie" if left.strip() == truth else "both_bad"
    return "A" if left.strip() == truth else "B"


def arithmetic_judge(prompts: list[str]) -> list[str]:
    """A judge backend (``module:attr``) that reads the judge prompt and scores the response 10 when it is the
    true sum, else 0; it answers 'Score: 10' for a response of 48+3 that says 41 (one planted mistake)."""
    replies = []
    for text in prompts:
        prompt = text.split("Prompt:\n", 1)[1].split("\n\nResponse:\n", 1)[0]
        response = text.split("\n\nResponse:\n", 1)[1].split("\n\n", 1)[0]
        right = response.strip() == str(true_sum(prompt)) or (prompt == "48+3=" and response == "41")
        replies.append(f"Checked the sum. Score: {10 if right else 0}")
    return replies
