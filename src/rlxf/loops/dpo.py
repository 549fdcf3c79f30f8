"""``loop: dpo`` — DPO, IPO, cDPO and SimPO (``preference.loss.name``) from a preference dataset.

The policy starts from ``model.path`` (after the ``sft`` warm-up stage when ``sft.steps > 0``); the
reference is a frozen copy of that start, saved in ``RUN_DIR/reference/``. Reference log-probs of every
training and held-out pair are computed once, before the first step, and carried on the rows
(``ref_chosen``, ``ref_rejected``); SimPO uses none.

Each optimizer step takes ``preference.batch_size`` pairs in micro-batches of
``preference.micro_batch_size`` pairs; a micro-batch's loss share is its mean loss times its share
of the pairs, so the step's gradient does not depend on the split.

Held-out metrics: ``eval/preference_accuracy`` (implicit reward margin > 0), ``eval/reward_margin``,
``eval/preference_loss``, and the task metrics of greedy answers (``eval/accuracy``, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch

from rlxf.algos import PreferenceLossConfig, preference_loss
from rlxf.config import Config
from rlxf.data.preferences import pair_batch
from rlxf.loops import LOOPS
from rlxf.loops.offline import Objective, run_offline, task_evaluator, warm_start_policy
from rlxf.loops.setup import RunContext, load_policy
from rlxf.models.saving import save_model
from rlxf.train.log_probs import sequence_log_probs

# Losses on length-averaged sequence log-probs (the others take the sum over response tokens).
LENGTH_NORMALISED = frozenset({"simpo"})


class PairLogProbs(NamedTuple):
    chosen: torch.Tensor  # [B] sequence log-probs, summed over response tokens (averaged when length-normalised)
    rejected: torch.Tensor  # [B]
    chosen_nll: torch.Tensor  # [B] token-mean negative log-likelihood of the chosen responses (RPO's term)


def pair_log_probs(model: torch.nn.Module, batch, length_normalised: bool) -> PairLogProbs:
    """Sequence log-probs of a :func:`pair_batch` (2B rows: the chosen, then the rejected responses)."""
    device = next(model.parameters()).device
    batch = batch.to(device)
    log_probs, _ = sequence_log_probs(model, batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask)
    mask = batch.loss_mask.float()
    summed, tokens = (log_probs * mask).sum(1), mask.sum(1).clamp(min=1)
    per_row = summed / tokens if length_normalised else summed
    half = len(batch) // 2
    return PairLogProbs(per_row[:half], per_row[half:], -(summed[:half] / tokens[:half]))


class PairScorer:
    """Turns preference rows into tokens and sequence log-probs under a model (chunked, no grad)."""

    def __init__(self, config: Config, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.chat_template = config.data.chat_template
        self.max_prompt_tokens = config.data.max_prompt_tokens
        self.chunk = config.preference.micro_batch_size
        self.length_normalised = config.preference.loss.name in LENGTH_NORMALISED

    def batch(self, rows: list[dict]):
        return pair_batch(rows, self.tokenizer, self.chat_template, self.max_prompt_tokens)

    def log_probs(self, model: torch.nn.Module, rows: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
        was_training = model.training
        model.eval()
        with torch.no_grad():
            parts = [
                pair_log_probs(model, self.batch(rows[i: i + self.chunk]), self.length_normalised)
                for i in range(0, len(rows), self.chunk)
            ]
        model.train(was_training)
        return torch.cat([p.chosen for p in parts]).cpu(), torch.cat([p.rejected for p in parts]).cpu()

    def with_reference(self, reference: torch.nn.Module, rows: list[dict]) -> list[dict]:
        """Copies of ``rows`` carrying their reference log-probs (``ref_chosen``, ``ref_rejected``)."""
        chosen, rejected = self.log_probs(reference, rows)
        return [{**row, "ref_chosen": float(c), "ref_rejected": float(r)} for row, c, r in zip(rows, chosen, rejected)]


def reference_of(rows: list[dict], cfg: PreferenceLossConfig) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    if not cfg.uses_reference:
        return None, None
    return torch.tensor([r["ref_chosen"] for r in rows]), torch.tensor([r["ref_rejected"] for r in rows])


def pair_loss_share(
    model: torch.nn.Module, scorer: PairScorer, cfg: PreferenceLossConfig, rows: list[dict], total_pairs: int
) -> tuple[torch.Tensor, dict[str, float]]:
    """This micro-batch's share of the step's mean preference loss, and its metrics."""
    pair = pair_log_probs(model, scorer.batch(rows), scorer.length_normalised)
    ref_chosen, ref_rejected = (None if t is None else t.to(pair.chosen.device) for t in reference_of(rows, cfg))
    loss, metrics = preference_loss(cfg, pair.chosen, pair.rejected, ref_chosen, ref_rejected, pair.chosen_nll)
    return loss * (len(rows) / total_pairs), metrics


def dpo_objective(config: Config, context: RunContext, checkpoint: Path | None, run_dir: Path, write,
                  stop=None) -> Objective:
    cfg = config.preference.loss
    reference_dir = run_dir / "reference"
    if checkpoint:
        policy = load_policy(config, str(checkpoint / "policy"), context.device)
    else:
        policy = warm_start_policy(config, context, write, stop)
        if cfg.uses_reference:
            save_model(policy, reference_dir)
    scorer = PairScorer(config, context.tokenizer)
    train_rows, eval_rows = context.task.train, context.task.eval
    if cfg.uses_reference:
        write(f"reference log-probs of {len(train_rows) + len(eval_rows)} pairs")
        reference = load_policy(config, str(reference_dir), context.device).requires_grad_(False)
        train_rows, eval_rows = scorer.with_reference(reference, train_rows), scorer.with_reference(reference, eval_rows)
        del reference
    task_eval = task_evaluator(config, context, policy)
    micro = config.preference.micro_batch_size

    def step_inputs(rows: list[dict]):
        chunks = [rows[i: i + micro] for i in range(0, len(rows), micro)]
        return chunks, lambda chunk: pair_loss_share(policy, scorer, cfg, chunk, len(rows))

    def evaluate() -> dict[str, float]:
        chosen, rejected = scorer.log_probs(policy, eval_rows)
        # the preference loss alone (an RPO term is a training aid, not a held-out measure)
        loss, metrics = preference_loss(cfg.model_copy(update={"nll_weight": 0.0}), chosen, rejected,
                                        *reference_of(eval_rows, cfg))
        return {
            **task_eval(),
            "eval/preference_accuracy": metrics["reward_accuracy"],
            "eval/reward_margin": metrics["reward_margin"],
            "eval/preference_loss": float(loss),
        }

    return Objective(
        model=policy, optim=config.preference.optim, rows=train_rows, steps=config.preference.steps,
        batch_size=config.preference.batch_size, step_inputs=step_inputs, evaluate=evaluate,
    )


@LOOPS.register("dpo")
def train_dpo(config: Config, resume: bool = False, write: Callable[[str], None] = print) -> dict:
    return run_offline(config, dpo_objective, resume, write)
