"""SFT examples as batches: the prompt, then the target response and end-of-sequence (the only loss tokens).

Rows carry the target in ``sft_target`` (text), or as the last assistant turn of ``messages``. The
response is the target's tokens followed by the chat template's end-of-turn token (the tokenizer's
EOS when the template has none), so the model learns to stop the way it will be asked to. Preference
pairs reuse it (data/preferences.py: the chosen and the rejected answer as two targets).
"""

from __future__ import annotations

import torch

from rlxf.batch import TrajectoryBatch, left_pad
from rlxf.data.prompt_tokens import encode_prompts
from rlxf.models.special_tokens import end_of_turn_id


def split_target(row: dict) -> tuple[dict, str]:
    """(the row as a prompt, the target response text)."""
    if "sft_target" in row:
        return row, row["sft_target"]
    messages = row.get("messages") or []
    if messages and messages[-1]["role"] == "assistant":
        return {**row, "messages": messages[:-1]}, messages[-1]["content"]
    raise ValueError(f"SFT row has neither `sft_target` nor a final assistant message: {str(row)[:120]}")


def sft_batch(rows: list[dict], tokenizer, chat_template: bool, max_prompt_tokens: int) -> TrajectoryBatch:
    prompts, targets = zip(*(split_target(r) for r in rows))
    prompt_tokens = encode_prompts(list(prompts), tokenizer, chat_template, max_prompt_tokens)
    end = end_of_turn_id(tokenizer)
    target_tokens = [
        ids + [end]
        for ids in tokenizer(list(targets), add_special_tokens=False)["input_ids"]
    ]
    prompt_ids, prompt_mask = left_pad(prompt_tokens, tokenizer.pad_token_id, torch.device("cpu"))
    width = max(len(t) for t in target_tokens)
    response_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    response_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, ids in enumerate(target_tokens):
        response_ids[i, : len(ids)] = torch.tensor(ids)
        response_mask[i, : len(ids)] = 1
    return TrajectoryBatch(
        prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids,
        response_mask=response_mask, loss_mask=response_mask.clone(),
        group_ids=torch.arange(len(rows)), metadata=[{} for _ in rows],
    )
