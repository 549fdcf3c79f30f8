"""AI verdicts on a campaign's pairs: any rlxf reward scores both responses, the higher one is preferred.

The reward is the recipe's (``reward.function`` + ``reward.kwargs``: the ``judge`` on the built-in engine
or an OpenAI-compatible endpoint, a rule) or a trained reward model (``reward_model`` with its path).
Scores closer than ``tie_margin`` make a tie. Each pair's row metadata (e.g. ``answer``) reaches the
reward, exactly as in training. Verdicts are stored under the judge's name, one per pair (re-judging
replaces them).

The prompt a reward is handed is the one it gets in RL: for a campaign sampled from a checkpoint through its
chat template, the rendered template decoded as a rollout decodes it (special tokens dropped, the system
prompt included), which is also the text ``loop: reward_model`` trains a reward model on. A chat reward model
scored on the bare question would read other tokens than it was trained on. Other campaigns hand the prompt as
the labeller reads it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from rlxf.studio.campaigns import get_campaign
from rlxf.studio.store import Store, now


def verdict_from_scores(first: float, second: float, tie_margin: float = 0.0) -> str:
    if first - second > tie_margin:
        return "first"
    if second - first > tie_margin:
        return "second"
    return "tie"


def reward_from_recipe(recipe: str | None, overrides: list[str]):
    """(a name for the judge, the recipe's reward object)."""
    from rlxf.checked_config import load_config
    from rlxf.rewards.registry import build_reward

    section = load_config(recipe, overrides).reward
    return section.function, build_reward(section.function, section.kwargs)


def label_with_reward(store: Store, campaign_id: int, reward, judge: str, tie_margin: float = 0.0,
                      batch_size: int = 64) -> int:
    """Score every pair of the campaign with ``reward``; store the verdicts as ``judge``. Returns the count."""
    pairs = store.query("SELECT id, prompt, first, second, meta FROM pairs WHERE campaign_id = ? ORDER BY position",
                        (campaign_id,))
    rendered = rendered_prompts(get_campaign(store, campaign_id))
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start: start + batch_size]
        rows = [json.loads(p["meta"]).get("prompt_row", {}) for p in chunk]
        prompts = rendered(rows) if rendered else [p["prompt"] for p in chunk]
        scores = reward.score(prompts + prompts, [p["first"] for p in chunk] + [p["second"] for p in chunk],
                              rows + rows).scores
        half = len(chunk)
        with store.transaction() as db:
            db.executemany(
                """INSERT INTO ai_labels (campaign_id, pair_id, judge, verdict, score_first, score_second, created)
                   VALUES (?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (pair_id, judge) DO UPDATE SET verdict = excluded.verdict,
                     score_first = excluded.score_first, score_second = excluded.score_second,
                     created = excluded.created""",
                [(campaign_id, p["id"], judge, verdict_from_scores(a, b, tie_margin), a, b, now())
                 for p, a, b in zip(chunk, scores[:half], scores[half:])],
            )
    return len(pairs)


def rendered_prompts(campaign: dict) -> Callable[[list[dict]], list[str]] | None:
    """For a campaign sampled from a checkpoint through its chat template: prompt rows -> the prompt texts a
    reward gets for them in RL (``data.prompt_tokens.reward_prompt_texts`` with that checkpoint's tokenizer).
    None for any other campaign."""
    if not (campaign.get("checkpoint") and campaign["sampling"].get("chat_template")):
        return None
    from rlxf.data.prompt_tokens import reward_prompt_texts
    from rlxf.models.loading import load_tokenizer

    tokenizer = load_tokenizer(campaign["checkpoint"])
    return lambda rows: reward_prompt_texts(rows, tokenizer, True, sys.maxsize)
