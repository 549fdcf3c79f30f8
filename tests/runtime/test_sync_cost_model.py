"""The step cost model (runtime/sync_cost_model.py) on cases computed by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rlxf.runtime.sync_cost_model import (
    GB,
    Cluster,
    Model,
    Placement,
    SyncOptions,
    Workload,
    bucket_count,
    engine_batch,
    fit_alpha_beta,
    generation_seconds,
    pipeline_seconds,
    predict_step,
    sync_seconds,
    sync_stages,
    train_seconds,
)

# round numbers so every figure below is easy to check by hand
CLUSTER = Cluster(gpus_per_node=8, flops=1e15, hbm_gbps=2000.0, nvlink_gbps=400.0, nic_gbps=50.0, pcie_gbps=50.0,
                  link_efficiency=0.5, message_alpha_s=0.0)
MODEL_10GB = Model("toy", params=5e9, active_params=5e9, bytes_per_param=2.0)


def test_a_pipeline_pays_every_stage_once_then_the_slowest_per_further_bucket():
    assert pipeline_seconds([1.0, 3.0, 2.0], buckets=4, overlap=True) == 6.0 + 3 * 3.0
    assert pipeline_seconds([1.0, 3.0, 2.0], buckets=4, overlap=False) == 4 * 6.0
    assert pipeline_seconds([1.0, 3.0, 2.0], buckets=1, overlap=True) == 6.0


def test_a_disaggregated_broadcast_crosses_the_nic():
    # 8 trainer GPUs + 8 engine GPUs: two nodes, so the bucket crosses a 50 GB/s NIC at 50% efficiency.
    placement = Placement(trainer_gpus=8, rollout_gpus=8, engine_tp=8)
    options = SyncOptions(bucket_bytes=1 * GB)
    stages = sync_stages(MODEL_10GB, CLUSTER, placement, options)
    assert stages["send"] == pytest.approx(1 / 25)  # 1 GB / 25 GB/s
    assert stages["gather"] == pytest.approx(1 / 200)  # NVLink 400 GB/s at 50%
    assert stages["load"] == pytest.approx(1 / 8 / 1000)  # each engine GPU copies 1/8 at half of HBM
    assert bucket_count(MODEL_10GB, options) == 10
    # overlapped: one pass through all three stages, then 9 more buckets at the send's 0.04 s
    assert sync_seconds(MODEL_10GB, CLUSTER, placement, options) == pytest.approx(1 / 25 + 1 / 200 + 1 / 8000 + 9 / 25)
    # latencies: a ring all-gather over 8 ranks pays 7, a tree broadcast to 8 receivers ceil(log2 9) = 4
    slow = sync_stages(MODEL_10GB, replace(CLUSTER, message_alpha_s=1e-3), placement,
                       replace(options, bucket_overhead_s=0.1))
    assert slow["gather"] == pytest.approx(7e-3 + 1 / 200)
    assert slow["send"] == pytest.approx(0.1 + 4e-3 + 1 / 25)  # rlxf's software cost once per bucket
    two_senders = Placement(trainer_gpus=16, rollout_gpus=8, engine_tp=8, senders=2)
    assert sync_stages(MODEL_10GB, CLUSTER, two_senders, options)["send"] == pytest.approx(1 / 50)
    # a trainer on 16 GPUs spans two nodes: its all-gather runs at the NIC's 25 GB/s, not NVLink's 200
    assert sync_stages(MODEL_10GB, CLUSTER, two_senders, options)["gather"] == pytest.approx(1 / 25)
    in_node = replace(two_senders, gather_gpus=8)  # TP/EP groups inside a node, stages across: NVLink again
    assert sync_stages(MODEL_10GB, CLUSTER, in_node, options)["gather"] == pytest.approx(1 / 200)


def test_colocated_cuda_ipc_moves_the_bytes_only_in_hbm():
    placement = Placement(trainer_gpus=8, rollout_gpus=8, engine_tp=8, colocated=True)
    options = SyncOptions(transport="cuda_ipc", bucket_bytes=2 * GB, overlap=False, bucket_overhead_s=0.01)
    stages = sync_stages(MODEL_10GB, CLUSTER, placement, options)
    assert stages["send"] == pytest.approx(0.01)  # one handle per bucket (free here) and the software cost
    # 5 buckets, each: gather 2/200, handle + software 0.01, load 2/8/1000
    assert sync_seconds(MODEL_10GB, CLUSTER, placement, options) == pytest.approx(5 * (0.01 + 0.01 + 0.00025))


def test_the_object_store_pays_two_pcie_copies_and_its_measured_rate():
    placement = Placement(trainer_gpus=1, rollout_gpus=1, engine_tp=1)
    options = SyncOptions(transport="object_store", bucket_bytes=10 * GB, object_store_gbps=0.5)
    # one bucket: no gather (one trainer GPU); send 2 x 10/50 + 10/0.5; load 10 / 1000
    assert sync_seconds(MODEL_10GB, CLUSTER, placement, options) == pytest.approx(0.4 + 20 + 0.01)


def test_decoding_is_memory_bound_until_the_batch_is_large():
    model = Model("dense", params=10e9, active_params=10e9, bytes_per_param=2.0, kv_bytes_per_token=0.0)
    placement = Placement(trainer_gpus=8, rollout_gpus=8, engine_tp=8)  # one engine of 8 GPUs
    small = Workload(sequences=8, prompt_tokens=0, mean_response_tokens=100, max_response_tokens=100, decode_mfu=1.0)
    # each step reads 20 GB / 8 GPUs at 2000 GB/s = 1.25 ms; computing 8 tokens: 2 x 1e10 x 8 / 8e15 = 0.02 ms
    assert generation_seconds(model, CLUSTER, placement, small, wait_for_longest=True) == pytest.approx(100 * 1.25e-3)
    large = replace(small, sequences=8000)
    # 8000 tokens per step: 2 x 1e10 x 8000 / 8e15 = 20 ms > 1.25 ms: compute-bound
    assert generation_seconds(model, CLUSTER, placement, large, wait_for_longest=True) == pytest.approx(100 * 0.02)


def test_the_kv_cache_bounds_the_batch_and_the_long_tail_waits_at_a_small_one():
    model = Model("dense", params=10e9, active_params=10e9, kv_bytes_per_token=1e6)
    placement = Placement(trainer_gpus=8, rollout_gpus=8, engine_tp=8)
    workload = Workload(sequences=8000, prompt_tokens=0, mean_response_tokens=50, max_response_tokens=100)
    # 8 x 80 GB x 0.9 - 20 GB of weights = 556 GB; the longest sequence's cache: 100 tokens x 1 MB
    assert engine_batch(model, CLUSTER, placement, workload) == (8000, 5560)
    tail = Workload(sequences=100, prompt_tokens=0, mean_response_tokens=100, max_response_tokens=500,
                    long_fraction=0.05, decode_mfu=1.0)
    lean = replace(model, kv_bytes_per_token=0.0)
    # 100 sequences x 100 tokens at batch 100, 1.25 ms a step; then 5 sequences for 400 more steps
    assert generation_seconds(lean, CLUSTER, placement, tail, wait_for_longest=False) == pytest.approx(0.125)
    assert generation_seconds(lean, CLUSTER, placement, tail, wait_for_longest=True) == pytest.approx(0.125 + 0.5)


def test_training_counts_six_flops_per_parameter_token_plus_two_per_extra_forward():
    workload = Workload(sequences=100, prompt_tokens=100, mean_response_tokens=900, extra_forwards=2, train_mfu=0.5)
    placement = Placement(trainer_gpus=10, rollout_gpus=10)
    # 10 x 5e9 x 1e5 tokens = 5e15 FLOPs / (10 GPUs x 1e15 x 0.5)
    assert train_seconds(MODEL_10GB, CLUSTER, placement, workload) == pytest.approx(1.0)


def test_async_overlaps_generation_with_training_on_their_own_devices_only():
    placement = Placement(trainer_gpus=8, rollout_gpus=8, engine_tp=8)
    options = SyncOptions(bucket_bytes=10 * GB)
    workload = Workload(sequences=8, prompt_tokens=0, mean_response_tokens=1000, max_response_tokens=4000,
                        extra_forwards=0, train_mfu=1.0, decode_mfu=1.0)
    step = predict_step(MODEL_10GB, CLUSTER, placement, options, workload)
    # decode step: 10 GB / 8 / 2000 GB/s = 0.625 ms -> 2.5 s for the longest response, 0.625 s streaming
    assert step.generation_s == pytest.approx(2.5) and step.generation_async_s == pytest.approx(0.625)
    assert step.train_s == pytest.approx(6 * 5e9 * 8 * 1000 / 8e15)  # 0.03 s
    assert step.sync_step_s == pytest.approx(step.generation_s + step.train_s + step.sync_s)
    assert step.async_step_s == pytest.approx(0.625 + step.sync_s)
    assert step.async_speedup == pytest.approx(step.sync_step_s / step.async_step_s)
    colocated = predict_step(MODEL_10GB, CLUSTER, Placement(8, 8, 8, colocated=True), options, workload)
    assert colocated.async_step_s == colocated.sync_step_s


def test_alpha_and_beta_are_recovered_from_measurements():
    alpha, beta = 0.002, 1 / (3 * GB)
    points = [(m, b, alpha * m + beta * b) for m, b in [(5, 0.3 * GB), (20, 1.1 * GB), (9, 0.5 * GB), (34, 2.2 * GB)]]
    assert fit_alpha_beta(points) == pytest.approx((alpha, beta))
    with pytest.raises(ValueError, match="not proportional"):
        fit_alpha_beta([(1, 1.0, 1.0), (2, 2.0, 2.0)])
