"""Supervised fine-tuning: next-token loss on the reference response, prompt tokens masked out.

The batches (prompt + target + end-of-sequence) are built by data/sft_examples.py.
"""

from __future__ import annotations

import torch

from rlxf.algos import LossNormaliser, aggregate_loss
from rlxf.batch import TrajectoryBatch
from rlxf.config import SFTConfig
from rlxf.data.prompts import PromptStream
from rlxf.data.sft_examples import sft_batch
from rlxf.train.engine import TrainEngine
from rlxf.train.log_probs import sequence_log_probs


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
