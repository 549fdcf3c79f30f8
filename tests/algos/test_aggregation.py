"""Loss aggregation: hand-computed values and micro-batch split invariance of gradients."""

import pytest
import torch
from torch.testing import assert_close

from rlxf.algos import LOSS_AGGREGATIONS, LossNormaliser, aggregate_loss, masked_token_nll

NAN = float("nan")
LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, NAN, NAN]])  # padding holds NaN: must not leak
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])


def test_normaliser_counts():
    norm = LossNormaliser.from_mask(torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 1]]))
    assert (norm.num_tokens, norm.num_seqs, norm.max_len) == (4.0, 2.0, 3.0)  # empty row not a sequence
    assert LossNormaliser.from_mask(MASK, max_response_len=8).max_len == 8.0
    assert LossNormaliser.from_mask(torch.zeros(2, 3)).num_tokens == 1.0  # no division by zero


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token_mean", (1 + 2 + 3 + 4) / 4),  # 2.5
        ("seq_mean_token_mean", ((1 + 2 + 3) / 3 + 4 / 1) / 2),  # 3.0
        ("seq_mean_token_sum", ((1 + 2 + 3) + 4) / 2),  # 5.0
        ("seq_mean_token_sum_norm", ((1 + 2 + 3) + 4) / (2 * 4)),  # 1.25 with max_len 4
    ],
)
def test_modes_by_hand(mode, expected):
    norm = LossNormaliser.from_mask(MASK, max_response_len=4)
    assert aggregate_loss(LOSS, MASK, mode, norm).item() == pytest.approx(expected)


def test_all_modes_tested():
    assert set(LOSS_AGGREGATIONS.names()) == {
        "token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm",
    }


def test_unknown_mode_names_known_ones():
    with pytest.raises(KeyError, match="token_mean"):
        aggregate_loss(LOSS, MASK, "mean", LossNormaliser.from_mask(MASK))


def _batch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 5, generator=g)
    lengths = [5, 1, 3, 0, 4, 2, 5]  # uneven rows, one without loss tokens
    mask = torch.zeros(7, 5)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    mask[4, 1] = 0  # a tool token inside a row
    return x, mask


def _grad(theta, x, mask, mode, norm, splits):
    theta.grad = None
    total = 0.0
    for rows in splits:
        per_token = torch.sin(x[rows] * theta) * (1 + x[rows] ** 2)
        loss = aggregate_loss(per_token, mask[rows], mode, norm(mask[rows]))
        loss.backward()
        total += loss.item()
    return theta.grad.clone(), total


SPLITS = [[0, 1], [2, 3, 4], [5, 6]], [[6], [0, 3], [5, 1, 2, 4]], [[i] for i in range(7)]


@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS.names())
def test_micro_batch_split_invariance(mode):
    x, mask = _batch()
    theta = torch.linspace(0.5, 1.5, 5, requires_grad=True)
    full = LossNormaliser.from_mask(mask, max_response_len=6)
    ref_grad, ref_loss = _grad(theta, x, mask, mode, lambda _: full, [list(range(7))])
    assert ref_grad.abs().sum() > 0
    for splits in SPLITS:
        grad, loss = _grad(theta, x, mask, mode, lambda _: full, splits)
        assert_close(grad, ref_grad)
        assert loss == pytest.approx(ref_loss, rel=1e-5)


@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS.names())
def test_per_micro_batch_normaliser_would_break_invariance(mode):
    # the control: normalising each micro-batch by its own counts (and averaging) is NOT the same
    x, mask = _batch()
    theta = torch.linspace(0.5, 1.5, 5, requires_grad=True)
    full = LossNormaliser.from_mask(mask, max_response_len=6)
    ref_grad, _ = _grad(theta, x, mask, mode, lambda _: full, [list(range(7))])
    splits = [[0], [1, 2, 3, 4, 5, 6]]  # uneven: 5 vs 11 tokens, 1 vs 5 sequences
    grad, _ = _grad(theta, x, mask, mode, lambda m: LossNormaliser.from_mask(m, max_response_len=6), splits)
    assert not torch.allclose(grad / len(splits), ref_grad)


def test_sft_nll_token_mean():
    log_probs = torch.tensor([[-1.0, -2.0], [-3.0, NAN]])
    mask = torch.tensor([[1, 1], [1, 0]])
    assert masked_token_nll(log_probs, mask, LossNormaliser.from_mask(mask)).item() == pytest.approx(6 / 3)
