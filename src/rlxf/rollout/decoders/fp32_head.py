"""An fp32 LM head for a decoder that runs in lower precision (``rollout.engine_options.fp32_lm_head``).

The last matmul, hidden state -> logits, is where a bf16 rollout engine loses most against an fp32
trainer: the head's weight is rounded to bf16 and so are the logits, a vocabulary-wide softmax later.
MiniMax-M1 (2025) traced its rollout/trainer log-prob gap to the head and computed it in fp32; veRL and
slime offer the same. Here the head keeps an fp32 copy of its weight (loaded from the trainer's own
tensors, not upcast from the bf16 copy) and multiplies the decoder's final hidden state, cast to fp32,
by it; the sampler's log-softmax then runs on fp32 logits, as it always does.

``LlamaDecoder`` simply holds its ``lm_head`` in fp32; ``Fp32LMHead`` is the same idea for the generic
``HFDecoder``, whose model keeps its own (bf16) head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["Fp32LMHead"]

# config attributes that transform the logits after the head's matmul: our own matmul would skip them
_LOGIT_TRANSFORMS = {"final_logit_softcapping": None, "logit_scale": None, "logits_scaling": 1.0}


class Fp32LMHead:
    """``hidden [.., H] -> logits [.., V]`` in fp32 with an fp32 copy of a transformers model's output
    embeddings. ``names``: the HF parameter names whose value is the head's weight (``lm_head.weight``;
    with tied embeddings ``model.embed_tokens.weight`` too), so a weight update refreshes the copy."""

    def __init__(self, weight: Tensor, names: tuple[str, ...]) -> None:
        self.weight = weight.detach().to(torch.float32, copy=True)
        self.names = names

    @classmethod
    def of(cls, model: torch.nn.Module) -> Fp32LMHead:
        """The head of ``model`` (an fp32 policy gives the exact weight; a bf16 one its upcast)."""
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        if not isinstance(head, torch.nn.Linear) or head.bias is not None:
            raise ValueError(f"rollout.engine_options.fp32_lm_head: {type(model).__name__}'s output embeddings "
                             "are not a plain bias-free linear layer")
        for attr, neutral in _LOGIT_TRANSFORMS.items():
            if getattr(model.config, attr, neutral) != neutral:
                raise ValueError(f"rollout.engine_options.fp32_lm_head: {type(model).__name__} transforms its "
                                 f"logits after the head ({attr}), which the fp32 head does not apply")
        # every name the head's tensor has (tied: the embedding's too, which may be the only one sent)
        names = tuple(name for name, t in model.state_dict(keep_vars=True).items() if t is head.weight)
        return cls(head.weight, names)

    def __call__(self, hidden: Tensor) -> Tensor:
        return F.linear(hidden.float(), self.weight)

    @torch.no_grad()
    def load_state_dict(self, state_dict: dict[str, Tensor]) -> None:
        """Refresh the copy from the trainer's tensor (fp32 stays exact), if the update holds the head."""
        for name in self.names:
            if name in state_dict:
                self.weight.copy_(state_dict[name].detach())
                return
