"""The ``optim`` sections of the config tree (``train.optim``, ``train.critic_optim``, ``sft.optim``,
``preference.optim``): what a train engine needs to build its optimizer and schedule."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class OptimConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    lr: float = Field(1e-4, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float | None = 1.0
    warmup_steps: int = Field(0, ge=0)
    # bf16 autocast of the forward/backward (weights and optimizer stay in model.dtype); see train/precision.py
    autocast: Literal["none", "bfloat16"] = "none"
    # An optimizer step whose loss or gradient norm is NaN/inf is skipped (counted as skipped_nonfinite);
    # this many in a row stop the run (train/engine.py, docs/reliability.md)
    max_nonfinite_in_a_row: int = Field(3, ge=1)
