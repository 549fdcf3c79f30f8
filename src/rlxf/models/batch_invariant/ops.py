"""Operations whose result for one row does not depend on how many rows run beside it.

What varies with the batch on the CPU (torch 2.13, measured by ``tests/models/test_batch_invariant_ops.py``):

* ``F.linear``: one row (``M = 1``) takes a matrix-vector kernel whose sums run in another order than
  the matrix kernel's; the matrix kernel gives a row the same floats for any ``M`` that is a multiple
  of 32. So every linear here runs on a row count padded to ``ROW_TILE``.
* elementwise ops (``silu``, ``exp``, ``cos``) compute the vectorised body and a scalar tail with
  different formulas; a tensor of ``ROW_TILE`` x anything elements has no tail.
* ``softmax`` over keys gives other floats when masked keys are added, and batched matmuls change
  their order with their shapes. Attention here is elementwise products summed over fixed-size
  innermost axes (``head_dim``, then ``KEY_BLOCK`` keys), the blocks added one after the other from
  key 0: a masked block adds exactly 0, so a longer (padded) key axis changes nothing.

``rms_norm`` and ``log_softmax`` over the last axis are row by row already.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["KEY_BLOCK", "ROW_TILE", "attention", "linear", "pad_rows", "padded", "rope"]

ROW_TILE = 32
KEY_BLOCK = 32


def padded(n: int, multiple: int = ROW_TILE) -> int:
    """``n`` rounded up to a (nonzero) multiple of ``multiple``."""
    return max(multiple, -(-n // multiple) * multiple)


def pad_rows(x: Tensor) -> Tensor:
    """``x`` [M, ...] with zero rows appended up to ``padded(M)``."""
    extra = padded(x.shape[0]) - x.shape[0]
    return x if extra == 0 else torch.cat([x, x.new_zeros((extra, *x.shape[1:]))])


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x W^T (+ b)`` for ``x`` [M, K] with ``M`` a multiple of ``ROW_TILE`` (the bias added apart,
    so it does not depend on the kernel's fused epilogue)."""
    if x.shape[0] % ROW_TILE:
        raise ValueError(f"batch-invariant linear needs a multiple of {ROW_TILE} rows, got {x.shape[0]}")
    y = F.linear(x, weight)
    return y if bias is None else y + bias


def rope(x: Tensor, positions: Tensor, inv_freq: Tensor, scaling: float) -> Tensor:
    """Rotary embedding of ``x`` [M, heads, hd] at ``positions`` [M] (M a multiple of ``ROW_TILE``):
    the angles are computed per row, not read from a table whose length would vary with the run."""
    freqs = positions.to(inv_freq.dtype)[:, None] * inv_freq[None, :]
    angles = torch.cat([freqs, freqs], dim=-1)
    cos, sin = (angles.cos() * scaling)[:, None], (angles.sin() * scaling)[:, None]
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


def attention(q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, scale: float) -> Tensor:
    """Causal attention in a canonical key layout (key ``j`` of a row is its token at position ``j``).

    q [B, nkv, g, Tq, hd] (the ``g`` query heads of each kv head), k, v [B, nkv, L, hd] with ``L`` a
    multiple of ``KEY_BLOCK``; query ``t`` of row ``b`` sees the keys ``j <= q_pos[b, t]``. Returns
    [B, nkv, g, Tq, hd]. Only the blocks some query reaches are visited: the others would add 0."""
    blocks = int(q_pos.max()) // KEY_BLOCK + 1
    keys = torch.arange(blocks * KEY_BLOCK, device=q.device)
    hidden = keys[None, None, :] > q_pos[:, :, None]  # [B, Tq, keys]
    scores = torch.cat([
        (q.unsqueeze(-2) * k[:, :, None, None, i * KEY_BLOCK:(i + 1) * KEY_BLOCK]).sum(-1) for i in range(blocks)
    ], dim=-1) * scale  # [B, nkv, g, Tq, keys]
    scores = scores.masked_fill(hidden[:, None, None], float("-inf"))
    weights = (scores - scores.amax(-1, keepdim=True)).exp()
    block_sums = weights.view(*weights.shape[:-1], blocks, KEY_BLOCK).sum(-1)
    total, out = block_sums[..., 0], None
    for i in range(blocks):
        w = weights[..., i * KEY_BLOCK:(i + 1) * KEY_BLOCK].unsqueeze(-2)  # [B, nkv, g, Tq, 1, KB]
        v_t = v[:, :, None, None, i * KEY_BLOCK:(i + 1) * KEY_BLOCK].transpose(-1, -2)  # [B, nkv, 1, 1, hd, KB]
        part = (w * v_t).sum(-1)
        out = part if out is None else out + part
        if i:
            total = total + block_sums[..., i]
    return out / total.unsqueeze(-1)
