"""peft's LoRA linear layer, with a forward that adds the adapter's update into the base output in place.

peft computes ``result + lora_B(lora_A(x)) * scaling``: for a rank-r update it allocates three tensors the
size of the layer's output (B's output, its scaled copy, the sum) beside the base output, in every adapted
linear of every forward (7 per decoder layer with ``all-linear``). They are freed at once, but glibc keeps
the pages they touched until the stage ends: on the default recipe LoRA's policy update touched 217 MiB
beyond its live heap where full-parameter training's touched 184, and LoRA's peak RSS sat above full
training's although it holds 38 MB less state (docs/benchmarks.md, LoRA vs full). Here ``result.addmm_(A(x), B^T, alpha=scaling)``
writes the update into the base output, which autograd does not keep (a linear saves its input and
weight, never its output): no output-sized temporary in the forward (and none in the backward, where
peft's scaling makes one), the same values and gradients up to float rounding, and peft's own
parameters, checkpoints, merging and adapter switching.

Anything else (merged or disabled adapters, mixed-adapter batches, variants such as DoRA, autocast or
mixed dtypes) takes peft's own forward.
"""

from __future__ import annotations

import torch
from peft.tuners.lora import Linear


class InPlaceLoraLinear(Linear):
    """``peft.tuners.lora.Linear`` (registered for ``nn.Linear`` targets by models/lora.py) whose forward
    allocates no output-sized tensor beyond the base layer's output."""

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        adapters = [name for name in self.active_adapters if name in self.lora_A]
        if args or kwargs or not self._in_place_applies(x, adapters):  # nn.Linear takes none: peft's options
            return super().forward(x, *args, **kwargs)
        # Rows, not [batch, seq, features]: an in-place op on a view of the output would make autograd
        # copy the whole gradient in backward (CopySlices); on the matrix itself it copies nothing.
        rows_in = x.reshape(-1, x.shape[-1])
        rows = self.base_layer(rows_in)
        for name in adapters:
            down = self.lora_A[name](self.lora_dropout[name](rows_in))  # [tokens, r]: the only new activation
            rows.addmm_(down, self.lora_B[name].weight.t(), alpha=self.scaling[name])
        return rows.view(*x.shape[:-1], rows.shape[-1])

    def _in_place_applies(self, x: torch.Tensor, adapters: list[str]) -> bool:
        if self.disable_adapters or self.merged:
            return False
        if torch.is_autocast_enabled(x.device.type):  # peft casts per adapter; keep its rules there
            return False
        if self.get_base_layer().weight.dtype != x.dtype:
            return False
        return all(not self._has_variant(name) and self.lora_A[name].weight.dtype == x.dtype
                   and self.lora_B[name].bias is None for name in adapters)

    def _has_variant(self, name: str) -> bool:
        """DoRA and the like (``lora_variant`` from peft 0.16; ``use_dora`` before)."""
        return name in getattr(self, "lora_variant", {}) or bool(getattr(self, "use_dora", {}).get(name, False))
