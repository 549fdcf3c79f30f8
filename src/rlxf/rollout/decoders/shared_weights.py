"""A LlamaDecoder that decodes with the model's own tensors (``rollout.engine_options.share_weights``).

The decoder normally keeps a fused copy of the weights (``wqkv``, ``wgu``). Shared, its layers hold detached
aliases of the model's parameters instead, q/k/v and gate/up as tuples of separate tensors: ``project``
multiplies each and joins the products, so the same forward runs on either layout. An in-process trainer's
optimizer step is then what the next decode sees, with no copy and no weight sync.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

# per layer: the decoder's key -> the HF name (under ``model.layers.<i>.``) it aliases
SINGLE = {"ln1": "input_layernorm.weight", "ln2": "post_attention_layernorm.weight", "wo": "self_attn.o_proj.weight",
          "bo": "self_attn.o_proj.bias", "wd": "mlp.down_proj.weight", "bd": "mlp.down_proj.bias"}
# the fused keys -> the HF names of their parts, in the fused order
SPLIT = {"wqkv": ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"),
         "bqkv": ("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"),
         "wgu": ("mlp.gate_proj.weight", "mlp.up_proj.weight"),
         "bgu": ("mlp.gate_proj.bias", "mlp.up_proj.bias")}


def alias_weights(decoder, state_dict: dict[str, Tensor]) -> None:
    """Point ``decoder``'s tensors (and its load targets) at ``state_dict``'s own, unfused."""
    def own(name: str) -> Tensor | None:
        return state_dict[name].detach() if name in state_dict else None

    decoder.embed, decoder.norm = own("model.embed_tokens.weight"), own("model.norm.weight")
    decoder.lm_head = decoder.embed if decoder.tied else own("lm_head.weight")
    targets = {"model.embed_tokens.weight": decoder.embed, "model.norm.weight": decoder.norm}
    if not decoder.tied:
        targets["lm_head.weight"] = decoder.lm_head
    for i, layer in enumerate(decoder.layers):
        prefix = f"model.layers.{i}."
        for key, name in SINGLE.items():
            layer[key] = own(prefix + name)
        for key, parts in SPLIT.items():
            layer[key] = None if layer[key] is None else tuple(own(prefix + part) for part in parts)
        for name in [*SINGLE.values(), *(part for parts in SPLIT.values() for part in parts)]:
            if prefix + name in state_dict:
                targets[prefix + name] = state_dict[prefix + name].detach()
    decoder._targets = targets


def project(x: Tensor, w: Tensor | tuple[Tensor, ...], b: Tensor | tuple[Tensor, ...] | None) -> Tensor:
    """``x`` through a fused weight, or through a shared decoder's separate ones, their products joined."""
    if isinstance(w, Tensor):
        return F.linear(x, w, b)
    biases = b if b is not None else (None,) * len(w)
    return torch.cat([F.linear(x, wi, bi) for wi, bi in zip(w, biases)], -1)
