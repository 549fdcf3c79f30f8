"""A cost model of one RL step at scale: weight sync, generation, training, and the sync-vs-async step.

Nothing here runs a model: it is arithmetic on a ``Model`` (parameters, active parameters, bytes per
parameter), a ``Cluster`` (public hardware figures per GPU: bf16 FLOP/s, HBM, NVLink and NIC bandwidth),
a ``Placement`` (which GPUs train, which generate, engine tensor parallelism) and a ``Workload``
(sequences and tokens per step). ``benchmarks/scale_model.py`` prints its predictions; the
per-message and per-byte costs of rlxf's own transports come from ``benchmarks/weight_sync_transports.py``
(``fit_alpha_beta``), the rest from the hardware's data sheets.

Weight sync is a pipeline of three stages per bucket: gather (a sharded trainer's all-gather over
NVLink), send (broadcast to the engines over NVLink, the NICs, or CUDA IPC), load (the engine copies the
bucket into its weights at HBM speed). Each stage costs ``alpha + bytes / bandwidth`` (the alpha-beta
model): alpha is the links' latency per message (NCCL: tens of microseconds per hop) plus, once per
bucket, rlxf's own software cost (measured). With overlap the stages of consecutive buckets run concurrently, so a sync costs one pass through
every stage plus ``buckets - 1`` times the slowest stage; without, ``buckets`` times their sum.

Generation is decoding with continuous batching: every decode step each engine reads its share of the
weights and the KV cache from HBM, or is compute-bound when its batch is large; its batch is what the KV
cache leaves room for. A synchronous step also waits for its long tail to reach the longest length at a
small batch; an asynchronous one overlaps that tail with the next step. Training is ``6 x active parameters x
tokens`` (forward and backward) plus ``2 x`` per extra forward pass (old and reference log-probs) at a
model FLOP utilisation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

GB = 1e9


@dataclass(frozen=True)
class Model:
    name: str
    params: float  # total parameters
    active_params: float  # per token (MoE: the routed experts' share plus the dense part)
    bytes_per_param: float = 2.0  # bf16 weights sent to the engines
    layers: int = 80
    kv_bytes_per_token: float = 0.0  # KV cache per token over all layers (read every decode step)

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bytes_per_param


@dataclass(frozen=True)
class Cluster:
    """Per-GPU public figures (defaults: an H100 SXM node with 8 GPUs, 400 Gb/s NIC per GPU)."""

    gpus_per_node: int = 8
    flops: float = 989e12  # dense bf16
    hbm_gbps: float = 3350.0
    nvlink_gbps: float = 450.0  # per direction
    nic_gbps: float = 50.0  # per GPU (400 Gb/s)
    pcie_gbps: float = 50.0  # host <-> device
    link_efficiency: float = 0.8  # share of a link's bandwidth a large NCCL transfer reaches
    message_alpha_s: float = 50e-6  # NCCL launch + per-hop latency of one message
    hbm_bytes: float = 80 * GB
    kv_memory_share: float = 0.9  # of an engine's HBM, for weights and KV cache (the rest: activations)


@dataclass(frozen=True)
class Placement:
    trainer_gpus: int
    rollout_gpus: int
    engine_tp: int = 8  # GPUs per rollout engine (tensor/expert parallel)
    colocated: bool = False  # trainer and engines time-share the same GPUs
    senders: int = 1  # trainer ranks that broadcast (one per node when > 1: each with its own NIC)
    gather_gpus: int = 0  # the group a bucket is gathered over (0: all trainer GPUs, FSDP; 8: TP/EP in a node)

    @property
    def gather_group(self) -> int:
        return self.gather_gpus or self.trainer_gpus


@dataclass(frozen=True)
class SyncOptions:
    transport: str = "collective"  # collective | cuda_ipc | object_store | gloo
    bucket_bytes: float = 1 * GB
    overlap: bool = True
    bucket_overhead_s: float = 0.0  # software cost of one bucket (stamps, Python, enqueue): measured
    object_store_gbps: float = 0.1  # serialise, store, fetch: measured (CPU-bound, per actor pair)
    gloo_gbps: float = 1.5  # a gloo broadcast over TCP: measured


@dataclass(frozen=True)
class Workload:
    sequences: int = 1024  # responses per step (prompts x samples)
    prompt_tokens: int = 512
    mean_response_tokens: int = 2048
    max_response_tokens: int = 8192  # a synchronous step waits for the longest
    long_fraction: float = 0.05  # the share of sequences that run past the mean (the long tail)
    extra_forwards: int = 2  # old and reference log-probs
    train_mfu: float = 0.4
    decode_mfu: float = 0.5  # of peak, when a decode step is compute-bound


def stage_seconds(nbytes: float, gbps: float, alpha: float = 0.0) -> float:
    """The alpha-beta cost of moving ``nbytes`` over a link of ``gbps`` GB/s."""
    return alpha + nbytes / (gbps * GB)


def pipeline_seconds(stages: list[float], buckets: int, overlap: bool) -> float:
    """``buckets`` buckets through stages costing ``stages`` each: overlapped, one pass through all of
    them plus the slowest stage for each further bucket; otherwise every stage of every bucket in turn."""
    if buckets <= 0:
        return 0.0
    if not overlap:
        return buckets * sum(stages)
    return sum(stages) + (buckets - 1) * max(stages)


def bucket_count(model: Model, options: SyncOptions) -> int:
    return max(1, math.ceil(model.weight_bytes / options.bucket_bytes))


def sync_stages(model: Model, cluster: Cluster, placement: Placement, options: SyncOptions) -> dict[str, float]:
    """Seconds per bucket of each stage (gather, send, load)."""
    bucket = min(options.bucket_bytes, model.weight_bytes)
    # gather: a ring all-gather of the bucket over its group (P - 1 latencies): NVLink inside a node, the
    # NICs once the group spans nodes (FSDP sharded over every trainer GPU)
    group = placement.gather_group
    link = cluster.nvlink_gbps if group <= cluster.gpus_per_node else cluster.nic_gbps
    gather = stage_seconds(bucket, link * cluster.link_efficiency, cluster.message_alpha_s * (group - 1)) \
        if group > 1 else 0.0
    load = stage_seconds(bucket / placement.engine_tp, cluster.hbm_gbps / 2)  # read + write in HBM
    # the software cost of a bucket (stamp, enqueue, Python) is paid once, with its send
    send = options.bucket_overhead_s + SEND_COSTS[options.transport](bucket, cluster, placement, options)
    return {"gather": gather, "send": send, "load": load}


def _collective_send(bucket, cluster: Cluster, placement: Placement, options: SyncOptions) -> float:
    """A pipelined (ring/tree) broadcast: the bytes once over the slowest link it crosses, plus one
    latency per hop of a binary tree over the receivers; ``senders`` stripes the bucket over several NICs."""
    receivers = placement.rollout_gpus
    crosses_nodes = not placement.colocated and (placement.trainer_gpus + receivers > cluster.gpus_per_node)
    link = cluster.nic_gbps * placement.senders if crosses_nodes else cluster.nvlink_gbps
    hops = math.ceil(math.log2(receivers + 1))
    return stage_seconds(bucket, link * cluster.link_efficiency, cluster.message_alpha_s * hops)


def _cuda_ipc_send(bucket, cluster: Cluster, placement: Placement, options: SyncOptions) -> float:
    """Colocated: the engine maps the trainer's bucket (one handle per bucket); the bytes move in ``load``."""
    return cluster.message_alpha_s


def _object_store_send(bucket, cluster: Cluster, placement: Placement, options: SyncOptions) -> float:
    """Device -> host, serialise / store / fetch (rlxf's measured rate), host -> device."""
    return 2 * bucket / (cluster.pcie_gbps * GB) + bucket / (options.object_store_gbps * GB)


def _gloo_send(bucket, cluster: Cluster, placement: Placement, options: SyncOptions) -> float:
    """Device -> host, a gloo broadcast over TCP (measured rate), host -> device."""
    return 2 * bucket / (cluster.pcie_gbps * GB) + bucket / (options.gloo_gbps * GB)


SEND_COSTS = {
    "collective": _collective_send,
    "cuda_ipc": _cuda_ipc_send,
    "object_store": _object_store_send,
    "gloo": _gloo_send,
}


def sync_seconds(model: Model, cluster: Cluster, placement: Placement, options: SyncOptions) -> float:
    stages = sync_stages(model, cluster, placement, options)
    return pipeline_seconds(list(stages.values()), bucket_count(model, options), options.overlap)


def decode_step_seconds(model: Model, cluster: Cluster, placement: Placement, workload: Workload, batch: int,
                        context: float) -> float:
    """One decode step of an engine holding ``batch`` sequences of ``context`` tokens: the larger of
    reading its share of the weights and KV cache from HBM, and its FLOPs."""
    gpus = placement.engine_tp
    read = (model.weight_bytes + batch * context * model.kv_bytes_per_token) / gpus
    compute = 2 * model.active_params * batch / (gpus * cluster.flops * workload.decode_mfu)
    return max(read / (cluster.hbm_gbps * GB), compute)


def engine_batch(model: Model, cluster: Cluster, placement: Placement, workload: Workload) -> tuple[int, int]:
    """(sequences per engine, how many of them fit at once: the KV cache in the HBM the weights leave)."""
    engines = max(1, placement.rollout_gpus // placement.engine_tp)
    per_engine = math.ceil(workload.sequences / engines)
    free = placement.engine_tp * cluster.hbm_bytes * cluster.kv_memory_share - model.weight_bytes
    longest = workload.prompt_tokens + workload.max_response_tokens
    fits = int(free // (longest * model.kv_bytes_per_token)) if model.kv_bytes_per_token else per_engine
    return per_engine, max(1, min(per_engine, fits))


def generation_seconds(model: Model, cluster: Cluster, placement: Placement, workload: Workload,
                       wait_for_longest: bool) -> float:
    """Continuous batching at the engine's capacity until the mean-length work is done (prefill
    included); a synchronous step then waits while its long tail (``long_fraction`` of the sequences)
    decodes up to the longest length at a small batch, which an asynchronous one overlaps."""
    per_engine, capacity = engine_batch(model, cluster, placement, workload)
    context = workload.prompt_tokens + workload.mean_response_tokens / 2
    step = decode_step_seconds(model, cluster, placement, workload, capacity, context)
    stream = per_engine * workload.mean_response_tokens / capacity * step
    prefill = 2 * model.active_params * per_engine * workload.prompt_tokens / (
        placement.engine_tp * cluster.flops * workload.decode_mfu)
    if not wait_for_longest:
        return prefill + stream
    tail_batch = max(1, math.ceil(per_engine * workload.long_fraction))
    tail_context = workload.prompt_tokens + (workload.mean_response_tokens + workload.max_response_tokens) / 2
    tail = (workload.max_response_tokens - workload.mean_response_tokens) * decode_step_seconds(
        model, cluster, placement, workload, min(tail_batch, capacity), tail_context)
    return prefill + stream + tail


def train_seconds(model: Model, cluster: Cluster, placement: Placement, workload: Workload) -> float:
    tokens = workload.sequences * (workload.prompt_tokens + workload.mean_response_tokens)
    flops = (6 + 2 * workload.extra_forwards) * model.active_params * tokens
    return flops / (placement.trainer_gpus * cluster.flops * workload.train_mfu)


@dataclass(frozen=True)
class StepPrediction:
    sync_s: float
    generation_s: float  # a synchronous step: until its longest response
    generation_async_s: float  # streaming: the same tokens at the mean length
    train_s: float
    sync_step_s: float
    async_step_s: float

    @property
    def async_speedup(self) -> float:
        return self.sync_step_s / self.async_step_s

    @property
    def sync_share(self) -> float:
        return self.sync_s / self.sync_step_s


def predict_step(model: Model, cluster: Cluster, placement: Placement, options: SyncOptions,
                 workload: Workload) -> StepPrediction:
    """Synchronous: generate, train, sync in turn. Asynchronous (one step off-policy, own devices):
    generation of step k+1 overlaps training on step k, then the sync pauses both. Colocated roles share
    every GPU, so they cannot overlap: their asynchronous step is the synchronous one."""
    sync = sync_seconds(model, cluster, placement, options)
    generation = generation_seconds(model, cluster, placement, workload, wait_for_longest=True)
    streaming = generation_seconds(model, cluster, placement, workload, wait_for_longest=False)
    train = train_seconds(model, cluster, placement, workload)
    sync_step = generation + train + sync
    async_step = sync_step if placement.colocated else max(streaming, train) + sync
    return StepPrediction(sync, generation, streaming, train, sync_step, async_step)


def fit_alpha_beta(points: list[tuple[float, float, float]]) -> tuple[float, float]:
    """Least-squares ``seconds = alpha * messages + beta * bytes`` over ``(messages, bytes, seconds)``
    points: the per-message and per-byte costs of a measured transport."""
    smm = sum(m * m for m, _, _ in points)
    sbb = sum(b * b for _, b, _ in points)
    smb = sum(m * b for m, b, _ in points)
    smt = sum(m * t for m, _, t in points)
    sbt = sum(b * t for _, b, t in points)
    det = smm * sbb - smb * smb
    if det == 0:
        raise ValueError("fit_alpha_beta needs points whose message counts and byte counts are not proportional")
    return (smt * sbb - sbt * smb) / det, (smm * sbt - smb * smt) / det


def with_measured(options: SyncOptions, **measured: float) -> SyncOptions:
    """``options`` with the costs measured on this machine (``bucket_overhead_s``, ``*_gbps``)."""
    return replace(options, **measured)
