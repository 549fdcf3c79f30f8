"""Logged rollouts: a bounded, reproducible pick of a batch's trajectories as plain JSON rows.

Each row: ``step``, ``prompt``, ``response``, ``reward`` and each reward component (``reward/NAME``),
``advantage`` (mean over the policy's own tokens), ``length`` (response tokens), ``truncated``,
``policy_version`` (the oldest version among the policy's tokens: what off-policy lag looks like),
``group`` (rows of one prompt share it), and for multi-turn rollouts ``turns`` and ``tool_calls``.
The pick is the first row of as many prompt groups as fit, spread over the batch, then more rows of
those groups: a reader sees different prompts first, and several answers to one prompt after.
"""

from __future__ import annotations

import torch

from rlxf.models.shown_text import shown_texts


def pick_rows(group_ids: list[int], limit: int) -> list[int]:
    """Up to ``limit`` row indices: one per group (in order of first appearance) before any second one."""
    by_group: dict[int, list[int]] = {}
    for index, group in enumerate(group_ids):
        by_group.setdefault(group, []).append(index)
    picked: list[int] = []
    depth = 0
    while len(picked) < min(limit, len(group_ids)):
        picked += [rows[depth] for rows in by_group.values() if depth < len(rows)][: limit - len(picked)]
        depth += 1
    return picked


def rollout_rows(batch, tokenizer, step: int, limit: int) -> list[dict]:
    """JSON rows for up to ``limit`` trajectories of ``batch``, decoded with ``tokenizer``."""
    index = pick_rows(batch.group_ids.tolist(), limit)
    chosen = batch.select(index).to("cpu")
    prompts = shown_texts(tokenizer, chosen.prompt_ids, chosen.prompt_mask)  # special tokens kept, padding dropped
    responses = shown_texts(tokenizer, chosen.response_ids, chosen.response_mask)
    own = chosen.loss_mask.bool()
    rows = []
    for i, meta in enumerate(chosen.metadata or [{}] * len(chosen)):
        row = {
            "step": step, "group": int(chosen.group_ids[i]), "prompt": prompts[i], "response": responses[i],
            "reward": _item(chosen.rewards, i),
            **{f"reward/{k}": v for k, v in meta.get("reward_components", {}).items()},
            "advantage": _masked_mean(chosen.advantages, own, i),
            "length": int(chosen.response_lengths[i]),
            "truncated": bool(chosen.truncated[i]) if chosen.truncated is not None else None,
            "policy_version": _oldest_version(chosen.policy_version, own, i),
        }
        if "turns" in meta:  # multi-turn: env turns, and tool calls when the environment counts them
            row["turns"] = meta["turns"]
            row["tool_calls"] = meta.get("env_components", {}).get("tool_calls", 0.0)
        if "answer" in meta:
            row["answer"] = meta["answer"]
        rows.append(row)
    return rows


def _item(values: torch.Tensor | None, i: int) -> float | None:
    return None if values is None else float(values[i])


def _masked_mean(values: torch.Tensor | None, mask: torch.Tensor, i: int) -> float | None:
    if values is None or not mask[i].any():
        return None
    return float(values[i][mask[i]].float().mean())


def _oldest_version(versions: torch.Tensor | None, mask: torch.Tensor, i: int) -> int | None:
    if versions is None or not mask[i].any():
        return None
    return int(versions[i][mask[i]].min())
