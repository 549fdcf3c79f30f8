"""What a large run would cost: the step cost model (``rlxf/runtime/sync_cost_model.py``) for dense 7B and
70B and a 671B MoE, the anchors' published sync times and async speed-ups beside its predictions, and the
bucket-size sweep behind rlxf's defaults.

    .venv/bin/python benchmarks/scale_model.py [--calibration weight_sync.json ...]

``--calibration`` takes JSON files printed by ``benchmarks/weight_sync_transports.py`` (runs with different
``--bucket-mb``, so messages and bytes vary apart) and fits rlxf's own per-bucket and per-byte costs
(``fit_alpha_beta``); without it the figures measured for docs/benchmarks.md are used (``MEASURED``).
Hardware figures are the vendors' data sheets (``CLUSTERS``). Prints JSON: ``calibration``, ``scale``
(per model and placement: sync / generation / train seconds, the synchronous and asynchronous step, the
async speed-up and the sync's share of a synchronous step), ``anchors`` (predicted vs published, with the
source) and ``bucket_sweep``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import emit  # noqa: E402
from rlxf.runtime.sync_cost_model import (  # noqa: E402
    GB,
    Cluster,
    Model,
    Placement,
    SyncOptions,
    Workload,
    fit_alpha_beta,
    predict_step,
    sync_seconds,
)

# Measured on 2 CPU cores (docs/benchmarks.md, "Weight-sync transports"), 100M-parameter runs: the median
# rates of the object store and of the collective (gloo over loopback), and one bucket's software cost in
# the collective path, which 67 buckets of 4 MiB vs 5 of 64 MiB could not resolve above the noise: the
# 4 MiB run bounds it at 2 ms a bucket, and half of that bound is used.
MEASURED = {"bucket_overhead_s": 1e-3, "object_store_gbps": 0.22, "gloo_gbps": 1.9}

CLUSTERS = {
    # H100 SXM: 989 TFLOP/s dense bf16, 3.35 TB/s HBM3, NVLink 4 450 GB/s per direction, 400 Gb/s NIC per GPU
    "h100": Cluster(),
    # GH200: 989 TFLOP/s, 4 TB/s HBM3, one 200 Gb/s NIC per superchip (4 per node)
    "gh200": Cluster(gpus_per_node=4, hbm_gbps=4000.0, nvlink_gbps=450.0, nic_gbps=25.0, pcie_gbps=450.0),
    # A100 80GB SXM: 312 TFLOP/s, 2 TB/s HBM2e, NVLink 3 300 GB/s per direction, 200 Gb/s NIC per GPU
    "a100": Cluster(flops=312e12, hbm_gbps=2039.0, nvlink_gbps=300.0, nic_gbps=25.0, pcie_gbps=25.0),
}

MODELS = {
    # Qwen2.5-7B: 28 layers, 4 KV heads x 128, bf16
    "dense-7B": Model("dense-7B", 7.6e9, 7.6e9, layers=28, kv_bytes_per_token=28 * 2 * 4 * 128 * 2),
    # Llama-3-70B: 80 layers, 8 KV heads x 128
    "dense-70B": Model("dense-70B", 70.6e9, 70.6e9, layers=80, kv_bytes_per_token=80 * 2 * 8 * 128 * 2),
    # DeepSeek-V3: 671B total, 37B active, MLA cache 576 values per layer, 61 layers; synced in bf16
    "moe-671B": Model("moe-671B", 671e9, 37e9, layers=61, kv_bytes_per_token=61 * 576 * 2),
}

# Per model: GPUs of each side, engine parallelism; the trainer either FSDP-sharded over all its GPUs (every
# bucket all-gathered across nodes, one sender) or gathered inside a node (TP/EP groups of 8, pipeline
# stages across nodes, one sender per stage sending its own layers)
PLACEMENTS = {
    "dense-7B": {"disaggregated": Placement(8, 8, engine_tp=1), "colocated": Placement(16, 16, 1, colocated=True)},
    "dense-70B": {"disaggregated_fsdp": Placement(32, 32, engine_tp=8),
                  "disaggregated_node_groups": Placement(32, 32, engine_tp=8, senders=4, gather_gpus=8),
                  "colocated_fsdp": Placement(64, 64, 8, colocated=True),
                  "colocated_node_groups": Placement(64, 64, 8, colocated=True, gather_gpus=8)},
    "moe-671B": {"disaggregated_fsdp": Placement(128, 128, engine_tp=32),
                 "disaggregated_node_groups": Placement(128, 128, engine_tp=32, senders=16, gather_gpus=8),
                 "colocated_node_groups": Placement(256, 256, 32, colocated=True, gather_gpus=8)},
}

# A reasoning workload with a long tail: 256 prompts x 8 samples, mean 3k tokens, 5% run on to 12k.
WORKLOAD = Workload(sequences=2048, prompt_tokens=512, mean_response_tokens=3000, max_response_tokens=12000)


def calibrate(paths: list[str]) -> dict[str, float]:
    """Per-bucket and per-byte costs from weight_sync_transports JSON files (several bucket sizes): the
    median rate of each transport, and the per-bucket cost of the collective where a least-squares fit
    resolves one (a fit at or below zero keeps ``MEASURED``'s bound)."""
    points: dict[str, list[tuple[float, float, float]]] = {}
    for path in paths:
        run = json.loads(Path(path).read_text())
        bucket = run["bucket_mb"] * 2**20
        for result in run["results"].values():
            nbytes = result["gigabytes"] * GB
            for transport, entry in result["transports"].items():
                if "seconds_per_sync" in entry:
                    messages = entry.get("buckets", math.ceil(nbytes / bucket))  # older runs: estimated
                    points.setdefault(transport, []).append((messages, nbytes, entry["seconds_per_sync"]))
    out = dict(MEASURED)
    rate = {t: statistics.median(b / s / GB for _, b, s in p) for t, p in points.items()}
    out.update({key: rate[t] for t, key in (("collective", "gloo_gbps"), ("object_store", "object_store_gbps"))
                if t in rate})
    if len(points.get("collective", [])) > 1:
        alpha, _ = fit_alpha_beta(points["collective"])
        if alpha > 0:
            out["bucket_overhead_s"] = alpha
    return out


def scale_table(measured: dict[str, float]) -> dict:
    table = {}
    for name, placements in PLACEMENTS.items():
        for label, placement in placements.items():
            transport = "cuda_ipc" if placement.colocated else "collective"
            options = SyncOptions(transport=transport, bucket_bytes=1 * GB, **measured)
            step = predict_step(MODELS[name], CLUSTERS["h100"], placement, options, WORKLOAD)
            table[f"{name}/{label}"] = {**{k: round(v, 3) for k, v in asdict(step).items()},
                                        "async_speedup": round(step.async_speedup, 2),
                                        "sync_share_of_sync_step": round(step.sync_share, 3), "transport": transport}
    return table


def anchors(measured: dict[str, float]) -> list[dict]:
    """Published figures beside the model's prediction for the same model, hardware and placement."""
    def sync(model: Model, cluster: str, placement: Placement, **options) -> float:
        return round(sync_seconds(model, CLUSTERS[cluster], placement, SyncOptions(**{**measured, **options})), 2)

    qwen27 = Model("27B", 27e9, 27e9)
    llama8 = Model("8B", 8e9, 8e9)
    llama70 = MODELS["dense-70B"]
    moe30 = Model("30B-A3B", 30e9, 3e9)
    rows = [
        {"what": "veRL nccl engine, 27B bf16, FSDP2 8 GPUs -> 8 vLLM GPUs (TP4), 2 nodes, EFA, bucket 2 GB",
         "published_s": 3.01, "predicted_s": sync(qwen27, "h100", Placement(8, 8, 4), bucket_bytes=2 * GB),
         "source": "https://github.com/verl-project/verl/pull/7263"},
        {"what": "the same, every trainer rank sending (nccl_parallel, 8 senders)",
         "published_s": 2.51, "predicted_s": sync(qwen27, "h100", Placement(8, 8, 4, senders=8), bucket_bytes=2 * GB),
         "source": "https://github.com/verl-project/verl/pull/7263"},
        {"what": "veRL broadcast bandwidth, GH200, 4 trainer GPUs -> 4 rollout GPUs on another node, one sender",
         "published_gbps": 25.0, "predicted_gbps": round(CLUSTERS["gh200"].nic_gbps * CLUSTERS["gh200"].link_efficiency, 1),
         "source": "https://github.com/verl-project/verl/issues/7167"},
        {"what": "the same with the 4 trainer GPUs sending (one NIC each)",
         "published_gbps": 90.0, "predicted_gbps": round(4 * CLUSTERS["gh200"].nic_gbps * CLUSTERS["gh200"].link_efficiency, 1),
         "source": "https://github.com/verl-project/verl/issues/7167"},
        {"what": "open-instruct / OpenRLHF sync over gloo, 8B (whole-model gather)",
         "published_s": 5.5, "predicted_s": sync(llama8, "h100", Placement(8, 8, 1), transport="gloo", bucket_bytes=16 * GB),
         "source": "https://github.com/vllm-project/vllm/issues/5723"},
        {"what": "the same, 70B, gathered one matrix at a time (~720 messages)",
         "published_s": 180.0, "predicted_s": sync(llama70, "h100", Placement(32, 8, 8), transport="gloo",
                                                    bucket_bytes=llama70.weight_bytes / 720),
         "source": "https://github.com/vllm-project/vllm/issues/5723"},
        {"what": "OpenRLHF 70B trainer -> vLLM transition (HybridFlow Fig. 14; 400 Gb/s ideal 2.8 s)",
         "published_s": 80.0, "predicted_s": sync(llama70, "a100", Placement(32, 32, 8), bucket_bytes=1 * GB),
         "source": "https://github.com/OpenRLHF/OpenRLHF/issues/647"},
        {"what": "NeMo-RL Megatron nccl refit, 30B-A3B MoE, non-colocated",
         "published_s": 17.5, "predicted_s": sync(moe30, "h100", Placement(8, 8, 8), bucket_bytes=1 * GB),
         "source": "https://github.com/NVIDIA-NeMo/RL/pull/3166"},
    ]
    seven = MODELS["dense-7B"]
    colocated = predict_step(seven, CLUSTERS["h100"], Placement(128, 128, 1, colocated=True),
                             SyncOptions(transport="cuda_ipc", **measured), WORKLOAD)
    split = predict_step(seven, CLUSTERS["h100"], Placement(32, 96, 1), SyncOptions(**measured), WORKLOAD)
    rows.append({"what": "veRL fully async vs colocated sync, Qwen2.5-7B, 128 GPUs (model: 32 train + 96 rollout)",
                 "published_speedup": "2.35-2.67", "predicted_speedup": round(colocated.sync_step_s / split.async_step_s, 2),
                 "source": "https://verl.readthedocs.io/en/latest/advance/fully_async.html"})
    own = predict_step(seven, CLUSTERS["h100"], Placement(64, 64, 1), SyncOptions(**measured), WORKLOAD)
    rows.append({"what": "AReaL: synchronous RL 'typically 2x slower' than asynchronous (model: 7B, 64 + 64 GPUs)",
                 "published_speedup": "~2", "predicted_speedup": round(own.async_speedup, 2),
                 "source": "https://inclusionai.github.io/AReaL/algorithms/async.html"})
    return rows


def bucket_sweep(measured: dict[str, float]) -> dict:
    """70B over the NIC (disaggregated) and over CUDA IPC (colocated): sync seconds per bucket size."""
    out = {}
    for label, placement, transport in (
            ("70B disaggregated collective", PLACEMENTS["dense-70B"]["disaggregated_node_groups"], "collective"),
            ("70B colocated cuda_ipc", PLACEMENTS["dense-70B"]["colocated_node_groups"], "cuda_ipc")):
        out[label] = {f"{int(mb)}MB": round(sync_seconds(MODELS["dense-70B"], CLUSTERS["h100"], placement,
                                                         SyncOptions(transport=transport, bucket_bytes=mb * 2**20,
                                                                     **measured)), 3)
                      for mb in (16, 64, 256, 1024, 4096, 16384)}
        out[label]["no_overlap_1024MB"] = round(sync_seconds(
            MODELS["dense-70B"], CLUSTERS["h100"], placement,
            replace(SyncOptions(transport=transport, bucket_bytes=2**30, **measured), overlap=False)), 3)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", nargs="*", default=[])
    args = parser.parse_args(argv)
    measured = calibrate(args.calibration)
    emit({"calibration": measured, "cluster": asdict(CLUSTERS["h100"]), "workload": asdict(WORKLOAD),
          "scale": scale_table(measured), "anchors": anchors(measured), "bucket_sweep": bucket_sweep(measured)})


if __name__ == "__main__":
    main()
