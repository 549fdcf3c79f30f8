"""The ``optim`` sections of the config tree (``train.optim``, ``train.critic_optim``, ``sft.optim``,
``preference.optim``): what a train engine needs to build its optimizer and schedule."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Beta = Annotated[float, Field(ge=0, lt=1)]  # AdamW refuses others, but only once the run has built its model


class OptimConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    lr: float = Field(1e-4, gt=0, description="AdamW learning rate (after warm-up)")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    betas: tuple[Beta, Beta] = Field((0.9, 0.999), description="AdamW betas")
    grad_clip: float | None = Field(1.0, gt=0, description="gradient norm clip; null = none")
    warmup_steps: int = Field(0, ge=0, description="optimizer steps of linear learning-rate warm-up from 0")
    autocast: Literal["none", "bfloat16"] = Field(
        "none", description="bf16 autocast of the forward/backward (weights and optimizer stay in model.dtype); "
        "see train/precision.py")
    max_nonfinite_in_a_row: int = Field(
        3, ge=1, description="an optimizer step with a NaN/inf loss or gradient norm is skipped; this many in a row "
        "stop the run (docs/reliability.md)")
