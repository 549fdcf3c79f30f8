"""Supervised fine-tuning: next-token loss on the reference response, prompt tokens masked out.

Rows carry the target in ``sft_target`` (text), or as the last assistant turn of ``messages``.
The response is the target's tokens followed by the chat template's end-of-turn token (the
tokenizer's EOS when the template has none), so the model learns to stop the way it will be asked to.
"""

from __future__ import annotations

import torch

from rlxf.algos import LossNormaliser, aggregate_loss
from rlxf.batch import TrajectoryBatch
from rlxf.config import SFTConfig
from rlxf.data.prompts import PromptStream, encode_prompts
from rlxf.models.special_tokens import end_of_turn_id
from rlxf.rollout.engine import left_pad
from rlxf.train.engine import TrainEngine
from rlxf.train.log_probs import sequence_log_probs


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


def sft_loss(model: torch.nn.Module, batch: TrajectoryBatch) -> tuple[torch.Tensor, dict[str, float]]:
    """Token-mean negative log-likelihood of the response tokens."""
    device = next(model.parameters()).device
    batch = batch.to(device)
    log_probs, _ = sequence_log_probs(
        model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask
    )
    normaliser = LossNormaliser.from_mask(batch.loss_mask)
    loss = aggregate_loss(-log_probs, batch.loss_mask, "token_mean", normaliser)
    return loss, {}


def run_sft(
    model: torch.nn.Module, tokenizer, rows: list[dict], cfg: SFTConfig, seed: int,
    chat_template: bool, max_prompt_tokens: int, on_step=None,
) -> list[float]:
    """``cfg.steps`` optimizer steps of ``cfg.batch_size`` rows; returns the loss of each step."""
    engine = TrainEngine(model, cfg.optim)
    stream = PromptStream(rows, seed=seed)
    losses = []
    for step in range(cfg.steps):
        batch = sft_batch(stream.take(cfg.batch_size), tokenizer, chat_template, max_prompt_tokens)
        metrics = engine.optimizer_step([batch], lambda b: sft_loss(model, b))
        losses.append(metrics["loss"])
        if on_step:
            on_step(step, metrics)
    return losses
