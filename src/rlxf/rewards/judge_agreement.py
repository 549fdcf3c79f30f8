"""The reward for training a judge: agreement of its verdict with the label, minus a format penalty.

    reward:
      function: judge_agreement
      kwargs: {format_penalty: 0.5}

The judge's reply is read by the parser the ``judge`` reward uses (``rewards/judge_parsing.py``), with
conflicting verdicts treated as unparseable (a judge must not hedge). ``row["form"]`` picks the reading:
``pointwise`` replies carry ``Score: N`` in ``[min_score, max_score]``, read as "right" at or above the
midpoint and compared with ``row["label"]`` (1 right, 0 wrong); ``pairwise`` replies carry ``[[A]]``,
``[[B]]`` or ``[[tie]]``, compared with ``row["label"]``. Score: 1 agree, 0 disagree, ``-format_penalty``
unparseable. Components: ``correct`` (held-out evaluation's verdict accuracy), ``malformed``, and for
pairwise rows ``first_bias`` = [judge says A] - [label is A] (its mean over a split holding both orders of
every pair is the judge's position bias: > 0 favours the first response).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from rlxf.rewards.base import RewardOutput
from rlxf.rewards.judge_parsing import parse_judge_score, parse_pairwise_verdict
from rlxf.rewards.registry import REWARDS

SWAPPED = {"A": "B", "B": "A", "tie": "tie"}


def pointwise_verdict(reply: str | None, min_score: float, max_score: float) -> int | None:
    score = parse_judge_score(reply, min_score, max_score, conflicts="reject")
    return None if score is None else int(score >= (min_score + max_score) / 2)


VERDICT_READERS: dict[str, Callable[..., object]] = {
    "pointwise": pointwise_verdict,
    "pairwise": lambda reply, min_score, max_score: parse_pairwise_verdict(reply, conflicts="reject"),
}


@REWARDS.register("judge_agreement")
class JudgeAgreementReward:
    def __init__(self, format_penalty: float = 0.5, min_score: float = 0.0, max_score: float = 1.0) -> None:
        if max_score <= min_score:
            raise ValueError(f"judge_agreement: max_score ({max_score}) must exceed min_score ({min_score})")
        self.format_penalty, self.min_score, self.max_score = format_penalty, min_score, max_score

    def verdict(self, reply: str | None, row: dict):
        form = row.get("form")
        if form not in VERDICT_READERS:
            raise ValueError(f"judge_agreement: row has form {form!r}; known: {sorted(VERDICT_READERS)}")
        return VERDICT_READERS[form](reply, self.min_score, self.max_score)

    def score(self, prompts: Sequence[str], responses: Sequence[str], metadata: Sequence[dict]) -> RewardOutput:
        scores, correct, malformed, first_bias = [], [], [], []
        for reply, row in zip(responses, metadata):
            verdict = self.verdict(reply, row)
            agree = verdict is not None and verdict == row["label"]
            scores.append(-self.format_penalty if verdict is None else float(agree))
            correct.append(float(agree))
            malformed.append(float(verdict is None))
            first_bias.append(float(verdict == "A") - float(row["label"] == "A") if row["form"] == "pairwise" else 0.0)
        return RewardOutput(scores, {"correct": correct, "malformed": malformed, "first_bias": first_bias})


def position_report(verdicts: Sequence[str | None], rows: Sequence[dict]) -> dict[str, float | None]:
    """Over pairwise rows holding each ``pair`` in both orders: ``position_bias`` (mean of [says A] -
    [label A] over the rows with a parsed verdict; None when no verdict parsed: an unparseable reply picks
    no position, and counting it as "not A" would report a bias towards B of the label's share of A) and
    ``position_consistency`` (the fraction of pairs whose two verdicts agree once the order is undone; an
    unparseable verdict is inconsistent)."""
    by_pair: dict[str, dict[int, str | None]] = defaultdict(dict)
    for verdict, row in zip(verdicts, rows):
        by_pair[row["pair"]][row["order"]] = verdict
    complete = [orders for orders in by_pair.values() if set(orders) == {0, 1}]
    if not complete:
        raise ValueError("position_report: no pair appears in both orders (rows need 'pair' and 'order' 0/1)")
    consistent = [orders[0] is not None and SWAPPED.get(orders[1]) == orders[0] for orders in complete]
    bias = [float(v == "A") - float(r["label"] == "A") for v, r in zip(verdicts, rows) if v is not None]
    return {"position_bias": sum(bias) / len(bias) if bias else None,
            "position_consistency": sum(consistent) / len(consistent)}
