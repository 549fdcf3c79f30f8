"""The single-process train engine: one model, its optimizer and schedule, gradient accumulation.

``optimizer_step(micro_batches, loss_of)`` runs forward/backward on each micro-batch (the loss
function returns that micro-batch's *share* of the mini-batch loss — see ``algos.aggregate_loss``),
then clips and steps once; a step whose loss or gradient norm is NaN/inf is skipped (the weights and
optimizer state stay as they were; ``skipped_nonfinite`` = 1), and ``optim.max_nonfinite_in_a_row``
skips in a row raise :class:`NonFiniteUpdateError`. Actor, critic, SFT, DPO and reward-model training all go through it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from rlxf.errors import RlxfError
from rlxf.tracking.reduce import reduce_metrics
from rlxf.train import checkpoint as ckpt
from rlxf.train.backends import TRAIN_ENGINES
from rlxf.train.optim_config import OptimConfig
from rlxf.train.precision import autocast, autocast_paused


class NonFiniteUpdateError(RlxfError, FloatingPointError):
    """Too many optimizer steps in a row had a NaN/inf loss or gradient."""


LossFn = Callable[[object], tuple[torch.Tensor, dict[str, float]]]


def build_optimizer(model: torch.nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(
        params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay, **optimizer_kernel(params)
    )


def optimizer_kernel(params: list[torch.Tensor]) -> dict[str, bool]:
    """The fused AdamW kernel (one pass over each tensor; on a 2-core AVX-512 CPU 6x the foreach
    kernel's speed on the tiny model: 2.1 vs 13 ms a step) where torch has it: floating-point
    parameters on the CPU or CUDA, FSDP2's sharded ones included; foreach elsewhere. Plain tensors beside
    DTensor shards (tensor parallelism's replicated embeddings and norms) take the per-tensor loop: both
    multi-tensor kernels refuse the mix."""
    if len({hasattr(p, "full_tensor") for p in params}) > 1:
        return {"foreach": False}
    fused = params and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    return {"fused": True} if fused else {"foreach": True}


def warmup_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int) -> torch.optim.lr_scheduler.LRScheduler:
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0
    )


@TRAIN_ENGINES.register("single")
class TrainEngine:
    def __init__(self, model: torch.nn.Module, cfg: OptimConfig) -> None:
        self.model = model
        self.cfg = cfg
        self.optimizer = build_optimizer(model, cfg)
        self.scheduler = warmup_schedule(self.optimizer, cfg.warmup_steps)

    # Data-parallel engines set this to the world size: DDP/FSDP average gradients over ranks, while
    # each rank's loss is already its share of the global mini-batch (algos.LossNormaliser).
    grad_scale: float = 1.0
    nonfinite_in_a_row = 0  # skipped optimizer steps since the last finite one
    nonfinite_total = 0

    def optimizer_step(self, micro_batches: Iterable, loss_of: LossFn) -> dict[str, float]:
        self.model.train()
        self._zero_grad()
        loss_total = 0.0
        history: list[dict[str, float]] = []
        # One autocast region over the mini-batch: its cache keeps each weight's bf16 copy from the first
        # micro-batch to the optimizer step (the weights do not change in between), where a region per
        # micro-batch cast every weight again each time. Backward runs with autocast paused, as outside it.
        with autocast(self.model, self.cfg.autocast):
            for micro in micro_batches:
                loss, metrics = loss_of(micro)
                with autocast_paused(self.model):
                    self._backward(loss * self.grad_scale if self.grad_scale != 1 else loss)
                loss_total += float(loss.detach())
                history.append(metrics)
        loss = self._global_loss(loss_total)  # the same value on every rank: they decide alike
        grad_norm = self._update() if math.isfinite(loss) else float("nan")
        skipped = not (math.isfinite(loss) and math.isfinite(grad_norm))
        self._count_nonfinite(skipped, loss, grad_norm)
        if not skipped:
            self.scheduler.step()
        # "loss" is a sum of shares (the mini-batch loss); *_max / *_min are extremes; the rest means.
        out = reduce_metrics(history)
        out.update(loss=loss, grad_norm=grad_norm, lr=self.scheduler.get_last_lr()[0], skipped_nonfinite=float(skipped))
        return out

    def _count_nonfinite(self, skipped: bool, loss: float, grad_norm: float) -> None:
        """A skipped step leaves the weights and optimizer state as they were; ``max_nonfinite_in_a_row``
        skips in a row stop the run (the last checkpoint holds finite weights)."""
        if not skipped:
            self.nonfinite_in_a_row = 0
            return
        self._discard_gradients()
        self.nonfinite_in_a_row += 1
        self.nonfinite_total += 1
        if self.nonfinite_in_a_row >= self.cfg.max_nonfinite_in_a_row:
            raise NonFiniteUpdateError(
                f"{self.nonfinite_in_a_row} optimizer steps in a row had a non-finite loss or gradient (last: loss "
                f"{loss}, grad norm {grad_norm}); each was skipped, the weights are the last finite ones. Stopping "
                f"(optim.max_nonfinite_in_a_row={self.cfg.max_nonfinite_in_a_row}): lower the learning rate or look "
                "for NaN/inf in the rewards, advantages or log-probs; resume from the last checkpoint"
            )

    # The three steps an engine that owns its own gradient handling (DeepSpeed) replaces.
    def _zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def _backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def _update(self) -> float:
        """Clip, step the optimizer (unless the norm is NaN/inf); returns the gradient norm before clipping."""
        grad_norm = self._clip_gradients()
        if math.isfinite(grad_norm):
            self.optimizer.step()
        return grad_norm

    def _discard_gradients(self) -> None:
        """Drop a skipped step's gradients so they do not leak into the next one."""
        self._zero_grad()

    def _global_loss(self, local_loss: float) -> float:
        """The mini-batch loss from this process's share (data-parallel engines sum over ranks)."""
        return local_loss

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model's weights (data-parallel engines gather them: every rank must call it)."""
        return self.model.state_dict()

    def load_full_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state)

    def save_state(self, out_dir, name: str) -> None:
        """Optimizer and schedule as ``<name>.optimizer.safetensors`` + ``.json`` (train/checkpoint.py)."""
        ckpt.save_optimizer(self.optimizer, self.scheduler, out_dir, name)

    def load_state(self, in_dir, name: str) -> None:
        ckpt.load_optimizer(self.optimizer, self.scheduler, in_dir, name)

    def _clip_gradients(self) -> float:
        params = [p for p in self.model.parameters() if p.grad is not None]
        limit = self.cfg.grad_clip if self.cfg.grad_clip else float("inf")
        return float(torch.nn.utils.clip_grad_norm_(params, limit))
