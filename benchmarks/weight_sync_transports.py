"""Weight sync between two processes with each transport (``runtime.weight_sync.transport``), against the
memcpy floor of the same bytes.

    .venv/bin/python benchmarks/weight_sync_transports.py [--models 100M,500M] [--dtypes bfloat16,float32] \\
        [--transports object_store,shared_memory,collective] [--reps 3] [--bucket-mb 64] [--engine-copies]

A randomly initialised Llama-architecture model (``MODELS``: ~100M and ~500M parameters) lives in a
trainer Ray actor (``ActorRole``); a rollout Ray actor (``RolloutRole``) holds an engine that keeps the
loaded tensors (``--engine-copies``: copies them into weights of its own, like the torch engine's
``load_state_dict``). Each sync is the run loop's own ``sync_weights`` over the transport, driver to
both actors, one torch thread each, no checksum (stamps are always checked). Per model, dtype and
transport: seconds per sync (median of ``--reps`` after a warm-up sync), buckets, GB/s of weight bytes, the
peak extra resident memory of each actor over the transport's syncs (``VmHWM``, reset before each sync,
minus the resident size before its first; pages of a shared region count on both sides), and the ratio
to a one-thread copy of the same bytes in the trainer's process, run before each sync (``MemcpyFloor``:
the floor on one machine). ``speedup_vs_object_store`` divides the object store's seconds by each transport's.
``--max-object-store-gb`` skips the object store where its copies (packed, store, fetched) would not fit.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import emit  # noqa: E402

# name -> Llama shape (hidden, layers, intermediate, vocab); untied embeddings
MODELS = {"100M": (768, 12, 2048, 32000), "500M": (1536, 16, 4096, 32000)}


def llama_config(name: str):
    from transformers import LlamaConfig

    hidden, layers, inter, vocab = MODELS[name]
    return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                       num_attention_heads=hidden // 64, num_key_value_heads=hidden // 64, tie_word_embeddings=False)


def parameter_shapes(name: str) -> list[tuple[int, ...]]:
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(llama_config(name))
    return [tuple(p.shape) for p in model.state_dict().values()]


def random_trainer(name: str, dtype: str):
    """An ``ActorRole`` around a randomly initialised model of ``MODELS[name]`` in ``dtype``."""
    from transformers import LlamaForCausalLM

    from rlxf.algos import AlgorithmConfig
    from rlxf.config import OptimConfig
    from rlxf.roles.actor import ActorRole

    torch.manual_seed(0)
    model = LlamaForCausalLM._from_config(llama_config(name), torch_dtype=getattr(torch, dtype))
    return ActorRole(model, OptimConfig(), AlgorithmConfig(), 8, 8, 1.0)


class HoldingEngine:
    """A rollout engine reduced to holding weights: the loaded views, or copies in weights of its own."""

    def __init__(self, copies: bool) -> None:
        self.copies, self.version, self.weights = copies, 0, {}

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        if not self.copies:
            self.weights = dict(state_dict)
        else:
            for name, tensor in state_dict.items():
                if name not in self.weights:
                    self.weights[name] = torch.empty_like(tensor)
                self.weights[name].copy_(tensor)
        self.version = version

    def held_weights(self) -> dict[str, torch.Tensor]:
        return self.weights


def holding_rollout(copies: bool):
    from rlxf.roles.rollout import RolloutRole

    return RolloutRole(HoldingEngine(copies), tokenizer=None, chat_template=False, max_prompt_tokens=0)


class PeakMemory:
    """Peak resident memory of this process over some calls, above where it stood at ``start`` (Linux:
    ``/proc/self/clear_refs`` 5 resets ``VmHWM``, so memcpy runs between the calls are not counted)."""

    def __init__(self, role) -> None:
        self.base, self.peak = 0, 0

    def start(self) -> None:
        self.base, self.peak = _status_kb("VmRSS"), 0

    def clear(self) -> None:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    def record(self) -> int:
        self.peak = max(self.peak, _status_kb("VmHWM") - self.base)
        return self.peak * 1024


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


class MemcpyFloor(PeakMemory):
    """In the trainer's process (one object attached per actor): its peak memory, and one thread copying
    every weight's bytes into a warm 256 MiB ring (8x the L3 cache here, so memory-bound like a flat
    copy, without a model-sized buffer)."""

    def __init__(self, role, ring_bytes: int = 256 * 2**20) -> None:
        super().__init__(role)
        self.sources = [t.detach().reshape(-1).view(torch.uint8) for t in role.model.state_dict().values()]
        self.ring = torch.zeros(ring_bytes, dtype=torch.uint8)

    def seconds(self) -> float:
        start = time.perf_counter()
        for source in self.sources:
            for chunk in source.split(self.ring.numel()):
                self.ring[: chunk.numel()].copy_(chunk)
        return time.perf_counter() - start


def measure(name: str, dtype: str, transports: list[str], args) -> dict:
    import ray

    from rlxf.runtime.proxy import RoleProxy
    from rlxf.runtime.worker import RoleWorker

    numel = sum(torch.Size(s).numel() for s in parameter_shapes(name))
    nbytes = numel * getattr(torch, dtype).itemsize
    result: dict = {"parameters": numel, "gigabytes": nbytes / 1e9, "transports": {}}
    for transport in transports:
        if transport == "object_store" and nbytes / 1e9 > args.max_object_store_gb:
            result["transports"][transport] = {"skipped": f"over --max-object-store-gb {args.max_object_store_gb}"}
            continue
        worker = ray.remote(RoleWorker).options(num_cpus=0)
        actor = RoleProxy("actor", worker.remote((random_trainer, (name, dtype), {}), 1), restartable=False)
        rollout = RoleProxy("rollout", worker.remote((holding_rollout, (args.engine_copies,), {}), 1),
                            restartable=False)
        result["transports"][transport] = sync_times(actor, rollout, transport, nbytes, args)
        actor.kill()
        rollout.kill()
    base = result["transports"].get("object_store", {}).get("seconds_per_sync")
    for entry in result["transports"].values():
        if base and "seconds_per_sync" in entry:
            entry["speedup_vs_object_store"] = base / entry["seconds_per_sync"]
    return result


def sync_times(actor, rollout, transport: str, nbytes: int, args) -> dict:
    """Syncs of ``transport`` alternating with memcpy runs in the trainer's process (the same conditions)."""
    from rlxf.runtime.config import WeightSyncConfig
    from rlxf.runtime.weight_sync import sync_weights

    cfg = WeightSyncConfig(transport=transport, bucket_mb=args.bucket_mb)
    floor = actor.attach(MemcpyFloor)
    peaks = [floor, rollout.attach(PeakMemory)]
    for peak in peaks:
        peak.start()
    times, copies = [], []
    for version in range(1, args.reps + 2):  # version 1 warms up: groups, regions, buffers
        copies.append(floor.seconds())
        for peak in peaks:
            peak.clear()
        metrics = sync_weights(actor, rollout, version, cfg)
        times.append(metrics["time/weight_sync_seconds"])
        extra = [peak.record() for peak in peaks]
    seconds, memcpy = statistics.median(times[1:]), statistics.median(copies[1:])
    return {"seconds_per_sync": seconds, "buckets": int(metrics["weight_sync/buckets"]),
            "gb_per_s": nbytes / 1e9 / seconds, "memcpy_seconds": memcpy,
            "memcpy_gb_per_s": nbytes / 1e9 / memcpy, "over_memcpy": seconds / memcpy,
            "trainer_peak_extra_gb": extra[0] / 1e9, "engine_peak_extra_gb": extra[1] / 1e9, "all_seconds": times}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="100M,500M")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--transports", default="object_store,shared_memory,collective")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--bucket-mb", type=float, default=64.0)
    parser.add_argument("--engine-copies", action="store_true")
    parser.add_argument("--max-object-store-gb", type=float, default=1.2)
    args = parser.parse_args(argv)

    from rlxf.runtime.ray_runtime import connect

    connect(None, num_cpus=2)
    import ray

    results = {}
    try:
        for name in args.models.split(","):
            for dtype in args.dtypes.split(","):
                results[f"{name}/{dtype}"] = measure(name, dtype, args.transports.split(","), args)
    finally:
        ray.shutdown()
    emit({"bucket_mb": args.bucket_mb, "engine_copies": args.engine_copies, "threads_per_actor": 1,
          "results": results})


if __name__ == "__main__":
    main()
