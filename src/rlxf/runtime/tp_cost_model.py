"""When tensor parallelism pays against FSDP for one training step: a cost model (arithmetic only).

A layout is ``tp`` GPUs per model replica inside a node (1 = plain FSDP) times FSDP over the
``gpus / tp`` replicas (the ``tp`` engine's ``("dp", "tp")`` mesh), with or without activation
recomputation. For each layout the model finds the fewest micro-batches that fit a GPU's memory, then
the step's time; ``best_layout`` picks the fastest layout that fits.

Memory per GPU (bytes; bf16 weights and gradients, fp32 AdamW master weights and moments):

* state ``16 P / gpus``: FSDP shards everything over the replicas and TP splits each replica, so the
  2-D mesh shards the state as finely as FSDP over all GPUs; TP does not save state memory;
* FSDP's gathered weights: two layers (the current one and the prefetched one), ``2 x 2 P / (L tp)``;
* activations per layer and token ``h (10 + 24 / tp)`` bytes (Korthikanti et al. 2022, "Reducing
  activation recomputation", bf16 without sequence parallelism, flash attention so no ``s^2`` term): the
  norms' and residual's ``10 h`` stay replicated, the rest is split; with recomputation, ``2 h`` per layer
  (its input) plus one layer's full activations.

Time per micro-batch (per GPU of a replica): compute ``(6, or 8 with recomputation) P tokens /
(tp F mfu)``; FSDP's all-gather in forward and backward (and once more to recompute) and reduce-scatter
of the gradients, ``(d - 1) / d x 2 P / tp`` bytes each, over NVLink while the ``dp`` group fits in a
node and the GPU's NIC once it spans nodes, **overlapped** with compute (FSDP prefetches); TP's two
activation all-reduces per layer in forward and two in backward (two more to recompute), ring cost
``2 (tp - 1) / tp x tokens h 2`` bytes over NVLink plus one latency each, **on the critical path**.
Not modelled: pipeline parallelism, sequence parallelism, GEMM efficiency lost to narrower TP shards,
the LM head and embeddings (replicated under TP here, as in rlxf's engine).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlxf.runtime.sync_cost_model import Cluster

STATE_BYTES_PER_PARAM = 16  # bf16 weights (2) + bf16 gradients (2) + fp32 master weights, m and v (12)


@dataclass(frozen=True)
class DenseModel:
    name: str
    params: float
    layers: int
    hidden: int


@dataclass(frozen=True)
class TrainLoad:
    tokens_per_step: float = 1024 * 4096  # one optimizer step's tokens (sequences x length)
    sequence_tokens: int = 4096  # a micro-batch holds whole sequences
    mfu: float = 0.4
    memory_share: float = 0.9  # of HBM for state and activations (the rest: allocator, workspace)


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    recompute: bool = False


@dataclass(frozen=True)
class LayoutCost:
    layout: Layout
    micro_tokens: int  # per replica per micro-batch (0: not even one sequence fits)
    micro_batches: int
    compute_s: float  # per micro-batch
    fsdp_s: float  # per micro-batch, overlapped with compute
    tp_s: float  # per micro-batch, exposed
    step_s: float  # math.inf when it does not fit

    @property
    def fits(self) -> bool:
        return self.micro_tokens > 0


def fixed_memory(model: DenseModel, layout: Layout, gpus: int) -> float:
    """State plus FSDP's two gathered layers, per GPU."""
    state = STATE_BYTES_PER_PARAM * model.params / gpus
    gathered = 2 * 2 * model.params / (model.layers * layout.tp) if gpus > layout.tp else 0.0
    return state + gathered


def activation_bytes_per_token(model: DenseModel, layout: Layout) -> float:
    layer = model.hidden * (10 + 24 / layout.tp)
    if layout.recompute:
        return model.layers * 2 * model.hidden + layer
    return model.layers * layer


def micro_batching(model: DenseModel, cluster: Cluster, layout: Layout, gpus: int, load: TrainLoad) -> tuple[int, int]:
    """(tokens per micro-batch, micro-batches) of a replica: as few micro-batches as fit in memory, their
    sequences balanced (e.g. 16 sequences where 10 fit: 2 of 8); (0, 0) when not one sequence fits."""
    free = cluster.hbm_bytes * load.memory_share - fixed_memory(model, layout, gpus)
    fit = max(0, int(free // (activation_bytes_per_token(model, layout) * load.sequence_tokens)))
    share = math.ceil(load.tokens_per_step / (gpus // layout.tp) / load.sequence_tokens)
    if fit == 0:
        return 0, 0
    micro_batches = math.ceil(share / fit)
    return math.ceil(share / micro_batches) * load.sequence_tokens, micro_batches


def layout_cost(model: DenseModel, cluster: Cluster, layout: Layout, gpus: int, load: TrainLoad) -> LayoutCost:
    tp, dp = layout.tp, gpus // layout.tp
    if tp > cluster.gpus_per_node or gpus % tp:
        raise ValueError(f"tp={tp} must divide the {gpus} GPUs and fit a node of {cluster.gpus_per_node}")
    tokens, micro_batches = micro_batching(model, cluster, layout, gpus, load)
    if tokens == 0:
        return LayoutCost(layout, 0, 0, 0.0, 0.0, 0.0, math.inf)
    passes = 8 if layout.recompute else 6
    compute = passes * model.params * tokens / (tp * cluster.flops * load.mfu)
    link = cluster.nvlink_gbps if gpus <= cluster.gpus_per_node else cluster.nic_gbps
    collectives = 4 if layout.recompute else 3
    fsdp = collectives * (dp - 1) / dp * 2 * model.params / tp / (link * cluster.link_efficiency * 1e9)
    all_reduces = (6 if layout.recompute else 4) * model.layers
    ring = 2 * (tp - 1) / tp * tokens * model.hidden * 2 / (cluster.nvlink_gbps * cluster.link_efficiency * 1e9)
    tp_s = all_reduces * (ring + cluster.message_alpha_s) if tp > 1 else 0.0
    step = micro_batches * (max(compute, fsdp) + tp_s)
    return LayoutCost(layout, tokens, micro_batches, compute, fsdp, tp_s, step)


def layout_costs(model: DenseModel, cluster: Cluster, gpus: int, load: TrainLoad) -> list[LayoutCost]:
    """Every layout: TP degrees 1, 2, 4, ... up to a node, each with and without recomputation."""
    degrees = [t for t in (1, 2, 4, 8, 16) if t <= cluster.gpus_per_node and gpus % t == 0]
    return [layout_cost(model, cluster, Layout(t, r), gpus, load) for t in degrees for r in (False, True)]


def best_layout(model: DenseModel, cluster: Cluster, gpus: int, load: TrainLoad) -> LayoutCost:
    """The fastest layout that fits (ties: the smaller TP degree, then no recomputation)."""
    return min(layout_costs(model, cluster, gpus, load), key=lambda c: (c.step_s, c.layout.tp, c.layout.recompute))
