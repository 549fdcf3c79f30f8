"""Loss aggregation: how a per-token loss [B, R] becomes the scalar that is back-propagated.

Vocabulary (the same words the trainer uses):

* **mini-batch** — the rows consumed by ONE optimizer step.
* **micro-batch** — a slice of the mini-batch that fits in memory; its gradients are accumulated.

A :class:`LossNormaliser` is built ONCE per mini-batch from the mini-batch's full loss mask, before it
is split into micro-batches. :func:`aggregate_loss` then returns each micro-batch's *share* of the
mini-batch loss: every mode is a sum over the micro-batch's rows divided by a constant taken from the
normaliser, so summing the returned losses (or accumulating their gradients with plain ``backward()``
calls, no extra scaling) over ANY split into micro-batches gives exactly the loss/gradient of the
whole mini-batch at once. Do not divide by the number of micro-batches.

Modes (``n_i`` = loss tokens of row ``i``; ``N`` = ``num_tokens``, ``S`` = ``num_seqs``, ``L`` =
``max_len``, all of the whole mini-batch):

* ``token_mean``              share ``sum_i sum_t l_it / N``       -> mean over all loss tokens
* ``seq_mean_token_mean``     share ``sum_i (sum_t l_it / n_i) / S`` -> mean over rows of each row's token mean
* ``seq_mean_token_sum``      share ``sum_i sum_t l_it / S``       -> mean over rows of each row's token sum
* ``seq_mean_token_sum_norm`` share ``sum_i sum_t l_it / (S * L)`` -> mean over rows of (row token sum / L)

Data parallel: build the normaliser from counts summed over all ranks
(:meth:`LossNormaliser.from_counts`); since DDP/FSDP *average* gradients over ranks, multiply the loss
by the world size (or all-reduce with SUM instead) to keep the same semantics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rlxf.algos.masked import masked_sum
from rlxf.registry import Registry


@dataclass(frozen=True)
class LossNormaliser:
    """The mini-batch constants every micro-batch divides by.

    * ``num_tokens`` — loss tokens (mask == 1) in the whole mini-batch, at least 1.
    * ``num_seqs``   — rows of the mini-batch with at least one loss token, at least 1 (rows whose mask
      is all zero, e.g. filtered overlong responses, do not dilute the mean).
    * ``max_len``    — the constant length of ``seq_mean_token_sum_norm`` (Dr. GRPO): the generation
      budget ``max_response_len`` when given, else the mask's width R.
    """

    num_tokens: float
    num_seqs: float
    max_len: float

    @classmethod
    def from_mask(cls, mask: torch.Tensor, max_response_len: int | None = None) -> LossNormaliser:
        """Counts of the FULL mini-batch mask [B, R] (call before splitting into micro-batches)."""
        per_row = mask.sum(dim=1)
        return cls.from_counts(
            num_tokens=float(per_row.sum()),
            num_seqs=float((per_row > 0).sum()),
            max_len=float(max_response_len if max_response_len is not None else mask.shape[1]),
        )

    @classmethod
    def from_counts(cls, num_tokens: float, num_seqs: float, max_len: float) -> LossNormaliser:
        """From counts already reduced elsewhere (e.g. summed over data-parallel ranks)."""
        if max_len <= 0:
            raise ValueError(f"max_len must be positive, got {max_len}")
        return cls(num_tokens=max(float(num_tokens), 1.0), num_seqs=max(float(num_seqs), 1.0), max_len=float(max_len))


Aggregation = Callable[[torch.Tensor, torch.Tensor, LossNormaliser], torch.Tensor]
LOSS_AGGREGATIONS: Registry[Aggregation] = Registry("loss aggregation")


@LOSS_AGGREGATIONS.register("token_mean")
def token_mean(loss: torch.Tensor, mask: torch.Tensor, norm: LossNormaliser) -> torch.Tensor:
    """Sum over the micro-batch's loss tokens / loss tokens of the whole mini-batch."""
    return masked_sum(loss, mask) / norm.num_tokens


@LOSS_AGGREGATIONS.register("seq_mean_token_mean")
def seq_mean_token_mean(loss: torch.Tensor, mask: torch.Tensor, norm: LossNormaliser) -> torch.Tensor:
    """Each row's token mean (its sum / its own token count), summed, / rows of the mini-batch."""
    row_means = masked_sum(loss, mask, dim=1) / mask.sum(dim=1).clamp(min=1)
    return row_means.sum() / norm.num_seqs


@LOSS_AGGREGATIONS.register("seq_mean_token_sum")
def seq_mean_token_sum(loss: torch.Tensor, mask: torch.Tensor, norm: LossNormaliser) -> torch.Tensor:
    """Sum over the micro-batch's loss tokens / rows of the mini-batch."""
    return masked_sum(loss, mask) / norm.num_seqs


@LOSS_AGGREGATIONS.register("seq_mean_token_sum_norm")
def seq_mean_token_sum_norm(loss: torch.Tensor, mask: torch.Tensor, norm: LossNormaliser) -> torch.Tensor:
    """Sum over the micro-batch's loss tokens / (rows of the mini-batch * constant max length)."""
    return masked_sum(loss, mask) / (norm.num_seqs * norm.max_len)


def aggregate_loss(
    per_token_loss: torch.Tensor, mask: torch.Tensor, mode: str, normaliser: LossNormaliser
) -> torch.Tensor:
    """This micro-batch's share of the mini-batch loss under ``mode`` (see the module docstring)."""
    return LOSS_AGGREGATIONS.get(mode)(per_token_loss, mask, normaliser)
