"""Prefill over a kept KV cache: :class:`LlamaDecoder` rows that continue sequences whose past is cached.

A multi-turn trajectory keeps the KV cache of its transcript between turns (``rollout/turn_sessions.py``);
its next turn only runs the new tokens (the last sampled token and the environment's observation) through
the model, attending to that past. :func:`prefill_with_past` builds one cohort for several such rows: each
row's past is copied into the cohort's cache right-aligned so that every row's new tokens end at the same
slot ``P`` (a cohort's rows share one write slot), the new tokens are left-padded to the longest, and
attention is causal over the row's own slots (pads before ``P - past - new`` are masked). A row without a
past is an ordinary prefill. :func:`row_cache` copies one row's filled slots back out when its turn ends.

Copying a past in and out costs a memory copy of the cache; recomputing it costs a forward pass over the
whole transcript (what re-prefilling each turn does).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from rlxf.rollout.decoders.kv_cohort import KVCohort
from rlxf.rollout.decoders.shared_weights import project

__all__ = ["prefill_with_past", "row_cache"]


def prefill_with_past(
    dec: Any, pasts: list[Tensor | None], new_ids: list[list[int]], max_new_tokens: int
) -> tuple[KVCohort, Tensor]:
    """A cohort of ``dec`` (a ``LlamaDecoder``, which imports this module: not imported here) for
    ``len(new_ids)`` rows and the next-token logits [B, V] of each. ``pasts[i]`` is row i's
    cached K/V [n_layers, 2, n_kv, past_len, head_dim] (as :func:`row_cache` returns; None: no past),
    ``new_ids[i]`` (at least one id) the tokens that follow it, at positions ``past_len ...``."""
    dev, B = dec.device, len(new_ids)
    if any(not ids for ids in new_ids):
        raise ValueError("prefill_with_past: every row needs at least one new token")
    new_len = torch.tensor([len(ids) for ids in new_ids], device=dev)
    past_len = torch.tensor([0 if p is None else p.shape[3] for p in pasts], device=dev)
    total = past_len + new_len
    P, Tm = int(total.max()), int(new_len.max())
    L = P + int(max_new_tokens)
    if dec.sliding_window is not None and L > dec.sliding_window:
        raise NotImplementedError(f"LlamaDecoder: sliding_window={dec.sliding_window} < max length {L}")
    nh, nkv, hd, inter = dec.n_heads, dec.n_kv, dec.head_dim, dec.inter
    dec._ensure_rope(L)
    cache = torch.empty(dec.n_layers, 2, B, nkv, L, hd, device=dev, dtype=dec._kv_dtype)
    cache[:, :, :, :, :P].zero_()  # pad slots are read (masked) by attention: finite values, never uninitialised memory
    start = P - total  # first slot of each row
    for i, past in enumerate(pasts):
        if past is not None:
            cache[:, :, i, :, int(start[i]) : P - int(new_len[i])] = past

    col = torch.arange(Tm, device=dev)
    real = col[None, :] >= (Tm - new_len)[:, None]  # [B, Tm]: left-padded new tokens
    ids = torch.zeros(B, Tm, dtype=torch.long, device=dev)
    for i, row in enumerate(new_ids):
        ids[i, Tm - len(row) :] = torch.tensor(row, device=dev)
    pos = (past_len[:, None] + col[None, :] - (Tm - new_len)[:, None]).clamp(min=0)  # [B, Tm]
    cos, sin = dec._cos[pos].unsqueeze(2), dec._sin[pos].unsqueeze(2)  # [B, Tm, 1, hd]
    q_slot = P - Tm + col  # [Tm]
    keys = torch.arange(P, device=dev)
    allowed = (keys[None, None, :] <= q_slot[None, :, None]) & (keys[None, None, :] >= start[:, None, None])
    allowed |= keys[None, None, :] == q_slot[None, :, None]  # pad queries never see an all-masked row
    mask = allowed.unsqueeze(1)  # [B, 1, Tm, P]
    gqa = nkv != nh
    write = real[:, None, :, None]  # [B, 1, Tm, 1]

    x = F.embedding(ids, dec.embed)  # [B, Tm, H]
    for li, ly in enumerate(dec.layers):
        qkv = project(dec._rms(x, ly["ln1"]), ly["wqkv"], ly["bqkv"]).view(B, Tm, nh + 2 * nkv, hd)
        qk = dec._rope(qkv[:, :, : nh + nkv], cos, sin)
        q = qk[:, :, :nh].transpose(1, 2).to(dec._kv_dtype)  # [B, nh, Tm, hd]
        window = cache[li, :, :, :, P - Tm : P]  # [2, B, nkv, Tm, hd]; only the real new tokens are written
        window[0] = torch.where(write, qk[:, :, nh:].transpose(1, 2).to(dec._kv_dtype), window[0])
        window[1] = torch.where(write, qkv[:, :, nh + nkv :].transpose(1, 2).to(dec._kv_dtype), window[1])
        k, v = cache[li, 0, :, :, :P], cache[li, 1, :, :, :P]
        if gqa:
            k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
        if li == dec.n_layers - 1:  # K/V are cached above; the rest of the last layer is needed for the last token only
            q, mask, x = q[:, :, -1:], mask[:, :, -1:], x[:, -1:]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).to(dec.dtype)  # [B, nh, Tq, hd]
        x = x + F.linear(o.transpose(1, 2).reshape(B, q.shape[2], nh * hd), ly["wo"], ly["bo"])
        gu = project(dec._rms(x, ly["ln2"]), ly["wgu"], ly["bgu"])
        x = x + F.linear(F.silu(gu[..., :inter]) * gu[..., inter:], ly["wd"], ly["bd"])
    logits = dec._head(dec._rms(x[:, -1], dec.norm))

    step_mask = torch.zeros(B, 1, 1, L, device=dev, dtype=dec._kv_dtype)
    step_mask[:, 0, 0, :P].masked_fill_(keys[None, :] < start[:, None], float("-inf"))
    return KVCohort(cache, total.clone(), step_mask, cur=P), logits


def row_cache(cohorts: list[KVCohort], row: int) -> Tensor:
    """A copy of the filled K/V slots of the caller's ``row`` (rows counted across ``cohorts``):
    [n_layers, 2, n_kv, length, head_dim], the ``past`` :func:`prefill_with_past` takes."""
    for cohort in cohorts:
        if row < cohort.rows:
            cached = row if cohort.live is None else int(cohort.live[row])
            start = int((cohort.step_mask[cached, 0, 0, : cohort.cur] == float("-inf")).sum())  # left pads
            return cohort.kv[:, :, cached, :, start : cohort.cur].clone()
        row -= cohort.rows
    raise IndexError("row_cache: no such row")
