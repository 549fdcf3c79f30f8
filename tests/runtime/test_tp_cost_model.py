"""The TP-vs-FSDP step cost model (runtime/tp_cost_model.py) on round numbers worked by hand."""

from __future__ import annotations

import math

import pytest

from rlxf.runtime.sync_cost_model import Cluster
from rlxf.runtime.tp_cost_model import DenseModel, Layout, TrainLoad, best_layout, layout_cost

# 8 GPUs a node, 1 PFLOP/s at 50% MFU, NVLink 400 GB/s and NIC 50 GB/s at 50%, no latency, 36.5 GB usable
CLUSTER = Cluster(gpus_per_node=8, flops=1e15, nvlink_gbps=400.0, nic_gbps=50.0, link_efficiency=0.5,
                  message_alpha_s=0.0, hbm_bytes=36.5e9)
LOAD = TrainLoad(tokens_per_step=1.6e6, sequence_tokens=1000, mfu=0.5, memory_share=1.0)
WIDE = DenseModel("wide", params=8e9, layers=10, hidden=10_000)  # activations dominate: 3.4 MB a token
NARROW = DenseModel("narrow", params=8e9, layers=10, hidden=1_000)


def test_fsdp_across_nodes_with_small_micro_batches_is_bound_by_its_gathers():
    # 16 GPUs: state 16 x 8e9 / 16 = 8 GB, two gathered layers 3.2 GB, 25.3 GB left; 3.4e9 bytes a sequence
    # -> 7 sequences fit; the replica's share is 100 sequences -> 15 micro-batches of ceil(100 / 15) = 7
    cost = layout_cost(WIDE, CLUSTER, Layout(1), 16, LOAD)
    assert (cost.micro_tokens, cost.micro_batches) == (7000, 15)
    assert cost.compute_s == pytest.approx(6 * 8e9 * 7000 / 5e14)  # 0.672 s
    assert cost.fsdp_s == pytest.approx(3 * 15 / 16 * 16e9 / 25e9)  # 1.8 s over the NICs: exposed
    assert cost.step_s == pytest.approx(15 * 1.8)


def test_tp_inside_a_node_splits_the_activations_and_pays():
    # TP 2 x dp 8: 8 GB state + 1.6 GB gathered; 10 x 1e4 x (10 + 12) = 2.2e6 bytes a token -> 12 sequences,
    # 200,000 tokens a replica -> 17 micro-batches; gathers 3 x 7/8 x 8e9 B / 25e9 = 0.84 s; 40 all-reduces
    # of 2 x 1/2 x 12,000 x 1e4 x 2 B over 200 GB/s = 1.2 ms each
    tp2 = layout_cost(WIDE, CLUSTER, Layout(2), 16, LOAD)
    assert (tp2.micro_tokens, tp2.micro_batches) == (12000, 17)
    assert tp2.compute_s == pytest.approx(6 * 8e9 * 12000 / (2 * 5e14))
    assert tp2.fsdp_s == pytest.approx(0.84)
    assert tp2.tp_s == pytest.approx(40 * 1.2e-3)
    assert tp2.step_s == pytest.approx(17 * (0.84 + 0.048))
    # TP 4: 17 sequences, 24 micro-batches of max(0.408 compute, 0.36 gathers) + 40 x 2.55 ms
    tp4 = layout_cost(WIDE, CLUSTER, Layout(4), 16, LOAD)
    assert (tp4.micro_tokens, tp4.micro_batches) == (17000, 24)
    assert tp4.step_s == pytest.approx(24 * (0.408 + 0.102))
    # TP 8: 21 sequences, 39 micro-batches of 0.252 s compute + 40 x 3.675 ms: the all-reduces now cost more
    assert layout_cost(WIDE, CLUSTER, Layout(8), 16, LOAD).step_s == pytest.approx(39 * (0.252 + 0.147))
    # FSDP with recomputation: 2e5 + 3.4e5 bytes a token -> 46 sequences fit; 100 in 3 micro-batches of 34,
    # each 8 x 8e9 x 34,000 / 5e14 = 4.35 s of compute (the gathers, 4 x 0.6 s, hide behind it)
    recompute = layout_cost(WIDE, CLUSTER, Layout(1, recompute=True), 16, LOAD)
    assert (recompute.micro_tokens, recompute.micro_batches) == (34000, 3)
    assert recompute.fsdp_s == pytest.approx(4 * 15 / 16 * 16e9 / 25e9)
    assert recompute.step_s == pytest.approx(3 * 8 * 8e9 * 34000 / 5e14)  # 13.06 s
    assert best_layout(WIDE, CLUSTER, 16, LOAD).layout == Layout(4)  # 12.24 s


def test_fsdp_wins_when_its_gathers_hide_behind_compute():
    # 8 GPUs in one node, narrow model: 50 sequences a micro-batch, 4.8 s compute vs 0.21 s of gathers
    fsdp = layout_cost(NARROW, CLUSTER, Layout(1), 8, LOAD)
    assert (fsdp.micro_tokens, fsdp.micro_batches) == (50000, 4)
    assert fsdp.fsdp_s == pytest.approx(3 * 7 / 8 * 16e9 / 200e9)
    assert fsdp.step_s == pytest.approx(4 * 4.8)
    assert best_layout(NARROW, CLUSTER, 8, LOAD).layout == Layout(1)  # TP only adds exposed all-reduces


def test_a_layout_that_does_not_fit_costs_infinity_and_tp_must_stay_in_a_node():
    # 2 GPUs: state alone is 64 GB per GPU
    assert layout_cost(WIDE, CLUSTER, Layout(2), 2, LOAD).step_s == math.inf
    assert not layout_cost(WIDE, CLUSTER, Layout(2), 2, LOAD).fits
    with pytest.raises(ValueError, match="tp=16 must divide the 32 GPUs and fit a node of 8"):
        layout_cost(WIDE, CLUSTER, Layout(16), 32, LOAD)
