"""Log-probs (and entropy) of target tokens through the LM head, a chunk of tokens at a time.

The plain path builds the [tokens, vocab] logits, keeps them (and their log-softmax) for backward and
then builds their gradient: for SmolLM2-135M (vocab 49,152) at 16 x 85 tokens that is 267 MB of fp32
logits, and as much again for each copy. Here the head's matmul, the log-softmax, the target's gather
and the entropy run over ``chunk`` tokens at a time and keep only one float per token (the
log-sum-exp) for backward, which recomputes each chunk's logits and turns them straight into the
chunk's gradient: the peak is O(chunk x vocab), not O(tokens x vocab), for one more head matmul per
chunk in backward (the head is 2 x H x V FLOPs a token, a fraction of the model's).

Gradients (one token, logits ``z = (h W^T + b) / T``, ``p = softmax(z)``, ``H = -sum p log p``):
``d log p_t / dz = onehot(t) - p`` and ``dH / dz = -p * (log p + H)``, then ``/ T`` for the raw logits,
and the two matmuls of a linear layer's backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlxf.config_error import ConfigError


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for fp32/bf16/fp16 matmuls (the plain path's ``logits.float()``), fp64 for fp64 ones."""
    return torch.promote_types(dtype, torch.float32)


def _matmul_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """The dtype the head's matmul runs in: autocast's where it is on (as ``nn.Linear`` would), else the
    weight's. Backward runs outside autocast, so the Function casts by hand in both passes."""
    device = hidden.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype


def _chunk_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                  temperature: float) -> torch.Tensor:
    z = F.linear(hidden.to(weight.dtype), weight, bias).to(_compute_dtype(weight.dtype))
    return z / temperature if temperature != 1.0 else z


def _cast(grad: torch.Tensor | None, like: torch.Tensor | None) -> torch.Tensor | None:
    return grad.to(like.dtype) if grad is not None else None


def _as(tensor: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    return tensor.to(dtype) if tensor is not None else None


def _accumulate_matmul(total: torch.Tensor | None, a: torch.Tensor, b: torch.Tensor,
                       dtype: torch.dtype) -> torch.Tensor:
    """``total + a @ b`` in ``dtype`` (in place where the matmul's dtype is the total's); ``a @ b`` itself
    when ``total`` is None."""
    if total is None:
        return (a @ b).to(dtype)
    if total.dtype == a.dtype:
        return total.addmm_(a, b)
    return total.add_((a @ b).to(dtype))


class ChunkedHeadLogProbs(torch.autograd.Function):
    """(log p(target) [N], entropy [N] or an empty tensor) of ``N`` hidden states through the head."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                targets: torch.Tensor, chunk: int, temperature: float, with_entropy: bool):
        ctx.matmul_dtype = _matmul_dtype(hidden, weight)
        n, dtype = hidden.shape[0], _compute_dtype(ctx.matmul_dtype)
        log_probs = torch.empty(n, dtype=dtype, device=hidden.device)
        lse = torch.empty(n, dtype=dtype, device=hidden.device)
        entropy = torch.empty(n if with_entropy else 0, dtype=dtype, device=hidden.device)
        w, b = weight.to(ctx.matmul_dtype), _as(bias, ctx.matmul_dtype)
        ctx.cast_weight = w if w is not weight else None  # backward reuses the cast (a [V, H] copy)
        with torch.autocast(hidden.device.type, enabled=False):
            for start in range(0, n, chunk):
                rows = slice(start, start + chunk)
                z = _chunk_logits(hidden[rows], w, b, temperature)
                lse[rows] = torch.logsumexp(z, dim=-1)
                log_probs[rows] = z.gather(1, targets[rows, None]).squeeze(1) - lse[rows]
                if with_entropy:
                    z.sub_(lse[rows, None])  # log p, in place: one [chunk, V] buffer
                    entropy[rows] = -(z.exp() * z).sum(-1)
        ctx.chunk, ctx.temperature = chunk, temperature
        ctx.save_for_backward(hidden, weight, bias, targets, lse, entropy)
        ctx.set_materialize_grads(False)
        if not with_entropy:
            ctx.mark_non_differentiable(entropy)
        return log_probs, entropy

    @staticmethod
    def backward(ctx, grad_log_probs: torch.Tensor | None, grad_entropy: torch.Tensor | None):
        hidden, weight, bias, targets, lse, entropy = ctx.saved_tensors
        if entropy.numel() == 0:
            grad_entropy = None
        if grad_log_probs is None and grad_entropy is None:
            return None, None, None, None, None, None, None
        wants_hidden, wants_weight, wants_bias = ctx.needs_input_grad[:3]
        mm, acc = ctx.matmul_dtype, _compute_dtype(ctx.matmul_dtype)
        w, b = ctx.cast_weight if ctx.cast_weight is not None else weight.to(mm), _as(bias, mm)
        ctx.cast_weight = None
        grad_hidden = torch.empty_like(hidden) if wants_hidden else None
        # a low-precision head's gradient is summed over chunks in fp32, rounded once at the end; the first
        # chunk's is the sum's start (no zeroed [V, H] matrix to add it into)
        grad_weight = grad_bias = None
        with torch.autocast(hidden.device.type, enabled=False):  # loss.backward() may run under autocast
            for start in range(0, hidden.shape[0], ctx.chunk):
                rows = slice(start, start + ctx.chunk)
                h = hidden[rows].to(mm)
                log_p = _chunk_logits(h, w, b, ctx.temperature).sub_(lse[rows, None])
                g = grad_log_probs[rows, None] if grad_log_probs is not None else None
                if grad_entropy is None:  # g_lp * (onehot(t) - p), in log_p's own buffer
                    grad = log_p.exp_().mul_(-g).scatter_add_(1, targets[rows, None], g)
                else:  # -g_H * p * (log p + H), then the log-prob term as above
                    p = log_p.exp()
                    grad = log_p.add_(entropy[rows, None]).mul_(p).mul_(-grad_entropy[rows, None])
                    if g is not None:
                        grad.sub_(p.mul_(g)).scatter_add_(1, targets[rows, None], g)
                if ctx.temperature != 1.0:
                    grad.div_(ctx.temperature)
                grad = grad.to(mm)
                if grad_hidden is not None:
                    grad_hidden[rows] = grad @ w
                if wants_weight:
                    grad_weight = _accumulate_matmul(grad_weight, grad.t(), h, acc)
                if wants_bias:
                    part = grad.sum(0).to(acc)
                    grad_bias = part if grad_bias is None else grad_bias.add_(part)
        if wants_weight and grad_weight is None:  # no tokens
            grad_weight = torch.zeros_like(weight, dtype=acc)
        if wants_bias and grad_bias is None:
            grad_bias = torch.zeros_like(bias, dtype=acc)
        return grad_hidden, _cast(grad_weight, weight), _cast(grad_bias, bias), None, None, None, None


def chunked_head_log_probs(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
    chunk: int, temperature: float = 1.0, with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log p(target) [N], entropy [N] or None) for hidden states [N, H] through a head ``weight``
    [V, H] (+ ``bias`` [V]), ``chunk`` tokens at a time; logits divided by ``temperature`` (0 and 1
    leave them as they are, as ``log_probs.token_log_probs`` does)."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    temperature = 1.0 if temperature in (0.0, 1.0) else float(temperature)
    log_probs, entropy = ChunkedHeadLogProbs.apply(
        hidden, weight, bias, targets.long(), int(chunk), temperature, with_entropy
    )
    return log_probs, entropy if with_entropy else None


# Config fields of architectures whose logits are not just ``h W^T + b`` (a cap or a scale in forward):
# the chunked path would compute other numbers than the model, so it refuses them.
LOGIT_TRANSFORM_FIELDS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


def lm_head_parameters(model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight [V, H], bias [V] or None) of ``model``'s LM head (``get_output_embeddings()``: the
    embedding matrix itself with tied embeddings, so its gradient reaches both uses)."""
    name = type(model).__name__
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, torch.nn.Linear):
        raise ConfigError(f"train.logits_chunk_tokens: {name}'s output layer is {type(head).__name__}, not a plain "
                          "nn.Linear (an adapted or quantised head?); set train.logits_chunk_tokens=0")
    config = getattr(model, "config", None)
    for field in LOGIT_TRANSFORM_FIELDS:
        if getattr(config, field, None) not in (None, 1.0):
            raise ConfigError(f"train.logits_chunk_tokens: {name} transforms its logits ({field}="
                              f"{getattr(config, field)}); set train.logits_chunk_tokens=0")
    return head.weight, head.bias
