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

__all__ = ["ATTENTION_ROWS", "KEY_BLOCK", "ROW_TILE", "attention", "linear", "pad_rows", "padded", "rope"]

ROW_TILE = 32
KEY_BLOCK = 32
# query rows per attention matmul: a decode step has only the g heads of a group per row (padded up to
# this), and a batched matmul gives the same floats for any batch count at a fixed matrix shape >= 2 rows
ATTENTION_ROWS = 8


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


def _tiled_bmm(a: Tensor, b: Tensor) -> Tensor:
    """a [B, n, R, x] (R a multiple of ATTENTION_ROWS) times b [B, n, x, y], one ``ATTENTION_ROWS``-row
    matrix at a time: every product the kernel sees is [ATTENTION_ROWS, x] @ [x, y], whatever B, n, R are."""
    batch, heads, rows, inner = a.shape
    tiles = rows // ATTENTION_ROWS
    left = a.reshape(batch * heads * tiles, ATTENTION_ROWS, inner)
    right = b[:, :, None].expand(batch, heads, tiles, *b.shape[2:]).reshape(batch * heads * tiles, *b.shape[2:])
    return torch.bmm(left, right).view(batch, heads, rows, b.shape[-1])


def attention(q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, scale: float) -> Tensor:
    """Causal attention in a canonical key layout (key ``j`` of a row is its token at position ``j``).

    q [B, nkv, R, hd]: ``R`` (a multiple of ``ATTENTION_ROWS``) query rows per kv head, e.g. the ``g`` heads of
    its group at every position; k, v [B, nkv, L, hd] with ``L`` a multiple of ``KEY_BLOCK``; query row
    ``r`` of sequence ``b`` sees the keys ``j <= q_pos[b, r]``. Returns [B, nkv, R, hd]. Scores and
    weighted values are ``[ATTENTION_ROWS, hd] x [hd, KEY_BLOCK]`` matmuls (one order of sums per shape),
    blocks summed one after the other from key 0; only the blocks some query reaches are visited (the
    others would add exactly 0)."""
    if q.shape[2] % ATTENTION_ROWS or k.shape[2] % KEY_BLOCK:
        raise ValueError(f"attention needs query rows in multiples of {ATTENTION_ROWS} and keys of {KEY_BLOCK}")
    blocks = int(q_pos.max()) // KEY_BLOCK + 1
    keys = torch.arange(blocks * KEY_BLOCK, device=q.device)
    hidden = keys[None, None, :] > q_pos[:, :, None]  # [B, R, keys]
    spans = [slice(i * KEY_BLOCK, (i + 1) * KEY_BLOCK) for i in range(blocks)]
    scores = torch.cat([_tiled_bmm(q, k[:, :, span].transpose(-1, -2)) for span in spans], dim=-1) * scale
    scores = scores.masked_fill(hidden[:, None], float("-inf"))
    weights = (scores - scores.amax(-1, keepdim=True)).exp()
    block_sums = weights.view(*weights.shape[:-1], blocks, KEY_BLOCK).sum(-1)
    total, out = block_sums[..., 0], None
    for i, span in enumerate(spans):
        part = _tiled_bmm(weights[..., span].contiguous(), v[:, :, span])
        out = part if out is None else out + part
        if i:
            total = total + block_sums[..., i]
    return out / total.unsqueeze(-1)
