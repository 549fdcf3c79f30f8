"""The ``model.lora`` section of the config tree (models/lora.py applies it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LoraConfig(BaseModel):
    """Low-rank adapters (peft) on the actor: only they train; the reference is the adapter switched off."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    r: int = Field(8, ge=1, description="rank of the adapters")
    alpha: float = Field(16.0, gt=0, description="scale: the adapter's update is multiplied by alpha / r")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout on the adapter's input")
    target_modules: list[str] | str = Field("all-linear", description="module names (q_proj, v_proj, ...) or "
                                            "peft's all-linear")
