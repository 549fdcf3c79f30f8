"""Human-AI agreement on a campaign: accuracy, Cohen's kappa, per labeller, and the pairs they disagree on.

A verdict is compared in the pair's canonical order (``first`` better, ``second`` better, or neither:
``tie`` and ``both_bad`` both mean "no preference" here). Skipped pairs are left out. Cohen's kappa
corrects the raw agreement for what two raters with the same verdict frequencies would reach by
chance: ``(p_o - p_e) / (1 - p_e)``, 1 = perfect, 0 = chance; with a single verdict class on both sides
(``p_e = 1``) it is undefined and reported as None.
"""

from __future__ import annotations

from collections import Counter

from rlxf.studio.store import Store

NO_PREFERENCE = {"tie": "none", "both_bad": "none"}


def comparable(verdict: str) -> str:
    return NO_PREFERENCE.get(verdict, verdict)


def cohens_kappa(a: list[str], b: list[str]) -> float | None:
    """Cohen's kappa of two raters' verdicts on the same items (None when undefined)."""
    if len(a) != len(b):
        raise ValueError(f"cohens_kappa: {len(a)} verdicts against {len(b)}")
    if not a:
        return None
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b)) / n
    count_a, count_b = Counter(a), Counter(b)
    expected = sum(count_a[k] * count_b[k] for k in count_a) / (n * n)
    if expected == 1.0:
        return None
    return (observed - expected) / (1.0 - expected)


def agreement_stats(human: list[str], ai: list[str]) -> dict:
    """``n``, ``accuracy`` (share of equal verdicts) and ``kappa`` of paired verdicts."""
    h, m = [comparable(v) for v in human], [comparable(v) for v in ai]
    n = len(h)
    return {"n": n, "accuracy": sum(x == y for x, y in zip(h, m)) / n if n else None, "kappa": cohens_kappa(h, m)}


def campaign_agreement(store: Store, campaign_id: int, judge: str) -> dict:
    """Agreement of every human label (not undone, not skipped) with ``judge``'s verdict on the same pair:
    overall, per labeller, and the disagreeing pairs (prompt, both responses, both verdicts)."""
    rows = store.query(
        """SELECT l.labeller, l.verdict AS human, a.verdict AS ai, a.score_first, a.score_second, l.reason,
                  p.id AS pair_id, p.prompt, p.first, p.second
           FROM labels l JOIN ai_labels a ON a.pair_id = l.pair_id AND a.judge = ?
                         JOIN pairs p ON p.id = l.pair_id
           WHERE l.campaign_id = ? AND l.undone = 0 AND l.verdict != 'skip' ORDER BY l.id""",
        (judge, campaign_id),
    )
    by_labeller: dict[str, list[dict]] = {}
    for row in rows:
        by_labeller.setdefault(row["labeller"], []).append(row)
    return {
        "judge": judge,
        "overall": agreement_stats([r["human"] for r in rows], [r["ai"] for r in rows]),
        "labellers": {who: agreement_stats([r["human"] for r in rs], [r["ai"] for r in rs])
                      for who, rs in sorted(by_labeller.items())},
        "disagreements": [r for r in rows if comparable(r["human"]) != comparable(r["ai"])],
    }


def judges_of(store: Store, campaign_id: int) -> list[str]:
    return [r["judge"] for r in store.query(
        "SELECT DISTINCT judge FROM ai_labels WHERE campaign_id = ? ORDER BY judge", (campaign_id,))]
