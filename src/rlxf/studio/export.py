"""From labels to the preference JSONL that ``loop: reward_model`` and ``loop: dpo`` read.

Per pair, the labellers' verdicts are counted (undone labels and skips never count): the response with
more "better" votes is ``chosen``, the other ``rejected``. ``tie`` and ``both_bad`` votes count for neither
side, so a pair whose votes do not lean one way (all ties, all "both bad", or as many votes each way)
is left out: Bradley–Terry and DPO need a winner and a loser. The counts of what was left out come back
with the export. Each row keeps the prompt row's metadata (e.g. ``answer``) and the provenance under
``studio``: campaign, pair, votes, labellers, checkpoint and sampling parameters.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from rlxf.studio.campaigns import get_campaign
from rlxf.studio.store import Store


def preference_rows(store: Store, campaign_id: int) -> tuple[list[dict], dict]:
    """(preference rows, counts: pairs, exported, no_majority, unlabelled)."""
    campaign = get_campaign(store, campaign_id)
    pairs = store.query("SELECT * FROM pairs WHERE campaign_id = ? ORDER BY position", (campaign_id,))
    labels = store.query("SELECT pair_id, labeller, verdict FROM labels WHERE campaign_id = ? AND undone = 0 "
                         "AND verdict != 'skip' ORDER BY id", (campaign_id,))
    votes: dict[int, list[dict]] = {}
    for label in labels:
        votes.setdefault(label["pair_id"], []).append(label)
    rows, counts = [], Counter(pairs=len(pairs))
    for pair in pairs:
        given = votes.get(pair["id"], [])
        tally = Counter(v["verdict"] for v in given)
        if not given:
            counts["unlabelled"] += 1
            continue
        if tally["first"] == tally["second"]:
            counts["no_majority"] += 1
            continue
        chosen, rejected = ((pair["first"], pair["second"]) if tally["first"] > tally["second"]
                            else (pair["second"], pair["first"]))
        provenance = {"campaign": campaign["name"], "pair": pair["position"], "votes": dict(tally),
                      "labellers": sorted({v["labeller"] for v in given}), "checkpoint": campaign["checkpoint"],
                      "sampling": campaign["sampling"]}
        rows.append({**json.loads(pair["meta"])["prompt_row"], "chosen": chosen, "rejected": rejected,
                     "studio": provenance})
        counts["exported"] += 1
    return rows, {k: counts[k] for k in ("pairs", "exported", "no_majority", "unlabelled")}


def export_campaign(store: Store, campaign_id: int, path: str | Path) -> dict:
    """Write the campaign's preference JSONL to ``path``; returns the counts (with ``path``)."""
    rows, counts = preference_rows(store, campaign_id)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {**counts, "path": str(path)}


def label_rows(store: Store, campaign_id: int) -> list[dict]:
    """Every label with its provenance (undone ones included, marked): who, when, verdict, shown order."""
    return store.query(
        """SELECT l.id, c.name AS campaign, p.position AS pair, l.labeller, l.verdict, l.reason,
                  CASE l.swapped WHEN 1 THEN 'second,first' ELSE 'first,second' END AS shown_left_right,
                  l.created, l.undone, c.checkpoint, c.sampling
           FROM labels l JOIN pairs p ON p.id = l.pair_id JOIN campaigns c ON c.id = l.campaign_id
           WHERE l.campaign_id = ? ORDER BY l.id""", (campaign_id,))
