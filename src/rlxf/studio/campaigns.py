"""Labelling campaigns: a named set of pairs (a prompt, two responses) with where they came from.

Pairs arrive from a JSONL of preference rows (``{prompt|messages, chosen, rejected}``, or
``{prompt|messages, responses: [two or more]}``) or from sampling a checkpoint (:mod:`.sampling`). A
campaign's ``overlap`` is how many different labellers each pair goes to.

A pair's stored order (``first`` / ``second``) is shuffled once, seeded by the campaign's name, so an
imported ``chosen`` is not always ``first``: verdicts in that order then fall on both sides, which is
what makes Cohen's kappa against an AI labeller meaningful (:mod:`.agreement`). The order shown to a
labeller is drawn again for every issue.
"""

from __future__ import annotations

import json
import random
from itertools import combinations

from rlxf.data.files import DatasetError
from rlxf.data.preferences import normalise_pair
from rlxf.studio import limits
from rlxf.studio.limits import InputError
from rlxf.studio.store import Store, as_json, now


def prompt_text(prompt_row: dict) -> str:
    """What the labeller reads as the prompt: the text, or a chat's turns as ``role: content`` lines."""
    if "messages" in prompt_row:
        return "\n".join(f"{m['role']}: {m['content']}" for m in prompt_row["messages"])
    return prompt_row["prompt"]


def pairs_from_row(row: dict, where: str) -> list[tuple[dict, str, str]]:
    """(prompt row, first, second) for each pair a row yields; a bad row raises naming ``where``."""
    if not isinstance(row, dict):
        raise InputError(f"{where}: a row must be a JSON object")
    if "responses" in row:
        responses = row["responses"]
        if not isinstance(responses, list) or len(responses) < 2:
            raise InputError(f"{where}: `responses` must list two or more responses")
        meta = {k: v for k, v in row.items() if k != "responses"}
        if not isinstance(meta.get("prompt", meta.get("messages")), (str, list)):
            raise InputError(f"{where}: a row needs a `prompt` (text) or `messages` (chat)")
        distinct = list(dict.fromkeys(responses))
        return [(meta, a, b) for a, b in combinations(distinct, 2)]
    try:
        return [normalise_pair(row, where)]
    except DatasetError as err:
        raise InputError(str(err)) from None


def parse_pairs_jsonl(text: str, source: str) -> list[tuple[dict, str, str]]:
    """Every pair in a JSONL text; errors name ``source:line``. Texts are bounded (:mod:`.limits`)."""
    pairs = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"{where}: not JSON ({err.msg})") from None
        for prompt_row, first, second in pairs_from_row(row, where):
            limits.bounded_text(prompt_text(prompt_row), f"{where}: prompt")
            limits.bounded_text(first, f"{where}: response")
            limits.bounded_text(second, f"{where}: response")
            pairs.append((prompt_row, first, second))
    if not pairs:
        raise InputError(f"{source}: no pairs in it")
    if len(pairs) > limits.MAX_PAIRS_PER_CAMPAIGN:
        raise InputError(f"{source}: {len(pairs)} pairs; a campaign holds at most {limits.MAX_PAIRS_PER_CAMPAIGN}")
    return pairs


def create_campaign(
    store: Store, name: str, pairs: list[tuple[dict, str, str]], source: str, overlap: int = 1,
    checkpoint: str | None = None, sampling: dict | None = None,
) -> int:
    """A new campaign holding ``pairs`` (all written in one transaction); returns its id."""
    name = limits.name(name, "campaign name")
    if not 1 <= overlap <= 100:
        raise InputError(f"overlap must be 1-100 labellers per pair, got {overlap}")
    if store.one("SELECT id FROM campaigns WHERE name = ?", (name,)):
        raise InputError(f"a campaign named {name!r} exists already")
    rng = random.Random(name)
    pairs = [(p, b, a) if rng.random() < 0.5 else (p, a, b) for p, a, b in pairs]
    with store.transaction() as db:
        campaign_id = db.execute(
            "INSERT INTO campaigns (name, source, checkpoint, sampling, overlap, created) VALUES (?, ?, ?, ?, ?, ?)",
            (name, source, checkpoint, as_json(sampling or {}), overlap, now()),
        ).lastrowid
        db.executemany(
            "INSERT INTO pairs (campaign_id, position, prompt, first, second, meta) VALUES (?, ?, ?, ?, ?, ?)",
            [(campaign_id, i, prompt_text(p), a, b, as_json({"prompt_row": p})) for i, (p, a, b) in enumerate(pairs)],
        )
    return campaign_id


def get_campaign(store: Store, campaign_id: int) -> dict:
    row = store.one("SELECT * FROM campaigns WHERE id = ?", (campaign_id,))
    if row is None:
        raise InputError(f"no campaign with id {campaign_id}")
    return {**row, "sampling": json.loads(row["sampling"])}


def list_campaigns(store: Store) -> list[dict]:
    """Every campaign with its counts: pairs, pairs with at least one verdict, labels, labellers."""
    return store.query(
        """SELECT c.id, c.name, c.source, c.checkpoint, c.overlap, c.created,
                  (SELECT COUNT(*) FROM pairs p WHERE p.campaign_id = c.id) AS pairs,
                  (SELECT COUNT(DISTINCT pair_id) FROM labels l WHERE l.campaign_id = c.id AND l.undone = 0
                     AND l.verdict != 'skip') AS labelled_pairs,
                  (SELECT COUNT(*) FROM labels l WHERE l.campaign_id = c.id AND l.undone = 0
                     AND l.verdict != 'skip') AS labels,
                  (SELECT COUNT(DISTINCT labeller) FROM labels l WHERE l.campaign_id = c.id AND l.undone = 0)
                     AS labellers
           FROM campaigns c ORDER BY c.id"""
    )
