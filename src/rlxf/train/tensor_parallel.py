"""Megatron-style tensor parallelism on HF decoder models, with ``torch.distributed.tensor``.

Each decoder layer's attention and MLP are split across the ranks of a ``tp`` mesh dimension the
Megatron way: q/k/v and gate/up projections column-wise (each rank computes its own heads and its
slice of the MLP's hidden units, no communication), o and down projections row-wise (each rank's
partial output is summed by one all-reduce). So a layer costs two activation all-reduces forward and
two backward (the input's gradient of the column-wise pair), and each rank holds 1/tp of the layers'
weights, gradients and optimizer state. The HF attention reshapes with ``-1`` heads and ``head_dim``,
so it runs unchanged on a rank's local heads (verified for transformers 5; GQA's kv-groups ratio is
the same locally). Embeddings, norms and the LM head stay replicated: every rank holds them whole and
computes the same gradient for them (tied embeddings stay tied).

Plans are registered by HF ``model_type``; Llama, Qwen2 (q/k/v biases are split with their weights)
and Mistral share module names. A model type without a plan, or heads, KV heads or MLP width not
divisible by the degree, is refused with a ``ConfigError`` before anything is sharded.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from rlxf.config_error import ConfigError
from rlxf.registry import Registry
from rlxf.train.fsdp_engine import transformer_blocks

# model_type -> {submodule of a decoder layer: "colwise" | "rowwise"}
TP_PLANS: Registry[dict[str, str]] = Registry("tensor-parallel plan")

LLAMA_LAYER_PLAN = {
    "self_attn.q_proj": "colwise",
    "self_attn.k_proj": "colwise",
    "self_attn.v_proj": "colwise",
    "self_attn.o_proj": "rowwise",
    "mlp.gate_proj": "colwise",
    "mlp.up_proj": "colwise",
    "mlp.down_proj": "rowwise",
}
for _model_type in ("llama", "qwen2", "mistral"):
    TP_PLANS.register(_model_type)(LLAMA_LAYER_PLAN)


def _styles():
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}


def layer_plan(model: torch.nn.Module, degree: int) -> dict[str, str]:
    """The plan for ``model`` at ``degree`` ranks; ``ConfigError`` if it cannot be split that way."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in TP_PLANS or not transformer_blocks(model):
        raise ConfigError(f"train.tensor_parallel: no tensor-parallel plan for {type(model).__name__} (model_type "
                          f"{model_type!r}); plans exist for {sorted(TP_PLANS)}: use train.backend fsdp2")
    heads = config.num_attention_heads
    sizes = {
        "num_attention_heads": heads,
        "num_key_value_heads": getattr(config, "num_key_value_heads", None) or heads,
        "intermediate_size": config.intermediate_size,
    }
    for name, size in sizes.items():
        if size % degree:
            raise ConfigError(f"train.tensor_parallel={degree} must divide the model's {name} ({size}): every rank "
                              f"takes an equal share of them; pick a degree that divides {sizes}")
    return TP_PLANS.get(model_type)


def apply_tensor_parallel(model: torch.nn.Module, tp_mesh) -> torch.nn.Module:
    """Shards ``model``'s decoder layers in place over the 1-D mesh ``tp_mesh``."""
    from torch.distributed.tensor.parallel import parallelize_module

    plan = layer_plan(model, tp_mesh.size())
    styles = _styles()
    for layer in transformer_blocks(model):
        parallelize_module(layer, tp_mesh, {name: styles[style]() for name, style in plan.items()})
    return model


def grad_norm(params: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of all gradients as in one process, for a mix of plain (replicated) tensors and DTensor
    shards on several meshes (TP's 1-D mesh, FSDP2's, the 2-D one): ``clip_grad_norm_`` refuses the mix.

    Each gradient's local sum of squares is added to the sum of its (mesh, sharded dims); one all-reduce
    per such group over its sharded dims (a replicated dim is counted once)."""
    sums: dict[tuple, torch.Tensor] = {}
    for param in params:
        grad = param.grad
        if isinstance(grad, DTensor):
            dims = tuple(i for i, p in enumerate(grad.placements) if not p.is_replicate())  # Shard, FSDP's _StridedShard
            key, local = (grad.device_mesh, dims), grad.to_local()
        else:
            key, local = (None, ()), grad
        square = local.detach().float().pow(2).sum()
        sums[key] = sums[key] + square if key in sums else square
    total = torch.zeros((), dtype=torch.float32)
    for (mesh, dims), square in sums.items():
        for dim in dims:
            dist.all_reduce(square, group=mesh.get_group(dim))
        total = total + square.to(total.device)
    return total.sqrt()


def clip_gradients(params: list[torch.Tensor], limit: float) -> float:
    """Scales the gradients to a norm of at most ``limit`` (as ``clip_grad_norm_``); returns the norm before."""
    norm = grad_norm(params)
    coef = float(torch.clamp(limit / (norm + 1e-6), max=1.0))
    if coef < 1.0:
        for param in params:
            param.grad.mul_(coef)
    return float(norm)
