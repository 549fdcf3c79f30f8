"""models/batch_invariant/ops.py: a row's result does not depend on the rows beside it or the padding."""

from __future__ import annotations

import pytest
import torch

from rlxf.models.batch_invariant.ops import ATTENTION_ROWS, KEY_BLOCK, attention, linear, pad_rows, padded


def test_padded_rounds_up_to_a_nonzero_multiple():
    assert [padded(n) for n in (0, 1, 32, 33, 64)] == [32, 32, 32, 64, 64]
    assert pad_rows(torch.ones(3, 2)).shape == (32, 2) and pad_rows(torch.ones(3, 2))[3:].abs().sum() == 0


def test_a_row_of_linear_is_the_same_floats_in_any_padded_batch():
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(96, 64, generator=g), torch.randn(96, generator=g)
    x = torch.randn(200, 64, generator=g)
    alone = linear(pad_rows(x[7:8]), w, b)[0]
    # (rows, where row 7 of x sits in them): 40 rows padded to 64, 195 to 224, 32 with other neighbours
    for rows, at in ((x[:40], 7), (x[5:200], 2), (torch.cat([x[7:8], torch.randn(31, 64, generator=g)]), 0)):
        assert torch.equal(linear(pad_rows(rows), w, b)[at], alone)
    torch.testing.assert_close(alone, x[7] @ w.T + b)  # and it is the linear layer
    with pytest.raises(ValueError, match="multiple of 32 rows, got 7"):
        linear(x[:7], w)


def _reference_attention(q, k, v, q_pos, scale):
    # plain softmax attention: the numbers the invariant version must approximate
    scores = torch.einsum("bnrd,bnld->bnrl", q, k) * scale
    hidden = torch.arange(k.shape[2])[None, None, :] > q_pos[:, :, None]
    return torch.einsum("bnrl,bnld->bnrd", scores.masked_fill(hidden[:, None], float("-inf")).softmax(-1), v)


def test_attention_is_softmax_attention_and_ignores_masked_keys_exactly():
    g = torch.Generator().manual_seed(1)
    batch, nkv, length, hd = 3, 2, 2 * KEY_BLOCK, 16
    q = torch.randn(batch, nkv, length, hd, generator=g)  # one query row per position
    k, v = torch.randn(batch, nkv, length, hd, generator=g), torch.randn(batch, nkv, length, hd, generator=g)
    q_pos = torch.arange(length).expand(batch, length)
    full = attention(q, k, v, q_pos, hd**-0.5)
    torch.testing.assert_close(full, _reference_attention(q, k, v, q_pos, hd**-0.5))
    # query 40 of row 1 alone (a decode step: one real row, the others zero) over a cache four blocks long
    # with junk past position 40
    shape = (1, nkv, 4 * KEY_BLOCK, hd)
    k_long, v_long = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    k_long[:, :, :41], v_long[:, :, :41] = k[1:2, :, :41], v[1:2, :, :41]
    step_q = torch.zeros(1, nkv, ATTENTION_ROWS, hd)
    step_q[:, :, 0] = q[1, :, 40]
    step = attention(step_q, k_long, v_long, torch.full((1, ATTENTION_ROWS), 40), hd**-0.5)
    assert torch.equal(step[:, :, 0], full[1, :, 40][None])
    with pytest.raises(ValueError, match=f"query rows in multiples of {ATTENTION_ROWS}"):
        attention(q[:, :, :7], k, v, q_pos[:, :7], 1.0)
