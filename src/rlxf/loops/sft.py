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
from rlxf.train.micro_batches import micro_batches


def sft_loss(model: torch.nn.Module, batch: TrajectoryBatch,
             normaliser: LossNormaliser | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Token-mean negative log-likelihood of the response tokens; with ``normaliser`` (the whole batch's
    counts) this micro-batch's share of the whole batch's token mean."""
    device = next(model.parameters()).device
    batch = batch.to(device)
    log_probs, _ = sequence_log_probs(
        model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask
    )
    if normaliser is None:
        normaliser = LossNormaliser.from_mask(batch.loss_mask)
    loss = aggregate_loss(-log_probs, batch.loss_mask, "token_mean", normaliser)
    return loss, {}


def sft_step_inputs(model: torch.nn.Module, batch: TrajectoryBatch, micro_batch_size: int | None):
    """(micro-batches, loss function) for one optimizer step over ``batch``: rows of similar target length
    together, each micro-batch trimmed of padding, every share divided by the whole batch's token count, so
    the step's gradient is the whole batch's token-mean NLL however it is split (up to float rounding)."""
    if micro_batch_size is None or micro_batch_size >= len(batch):
        return [batch], lambda micro: sft_loss(model, micro)
    normaliser = LossNormaliser.from_mask(batch.loss_mask)
    by_length = batch.select(torch.argsort(batch.response_lengths, stable=True))
    return micro_batches(by_length, micro_batch_size), lambda micro: sft_loss(model, micro, normaliser)


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
        metrics = engine.optimizer_step(*sft_step_inputs(model, batch, cfg.micro_batch_size))
        losses.append(metrics["loss"])
        if on_step:
            on_step(step, metrics)
    return losses
