"""Where an RL run's peak RSS comes from: memory sampled every millisecond, attributed to the stage running.

Stages are the run's own functions (start-up pieces, each rollout, update, weight sync, evaluation and
checkpoint), wrapped by name. Per stage: the most RSS seen (and its anonymous and file-backed parts),
the most heap in use by malloc (``mallinfo2``: live tensors and objects, without the freed memory glibc
keeps), and how far the stage raised the process's high-water mark (``raised_mib``: summed over the
run, these add up to the peak). Run once per arm, e.g. full vs LoRA (benchmarks/lora_vs_full.py):

    python benchmarks/rss_by_stage.py model.path=PATH sft.steps=0 train.steps=20 [model.lora.r=16 ...]

A recipe first (else the built-in default recipe), e.g. the real-model one with activations recomputed:

    python benchmarks/rss_by_stage.py recipes/smollm2_grpo.yaml train.steps=3 model.gradient_checkpointing=true
"""

from __future__ import annotations

import ctypes
import resource
import sys
import threading
import time

import torch

from common import emit


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


_LIBC = ctypes.CDLL("libc.so.6")
_LIBC.mallinfo2.restype = _MallInfo2


def memory_mib() -> dict[str, float]:
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(("RssAnon:", "RssFile:", "RssShmem:")):
                fields[line.split(":")[0]] = int(line.split()[1]) / 1024
    info = _LIBC.mallinfo2()
    return {"rss": sum(fields.values()), "anon": fields["RssAnon"], "file": fields["RssFile"],
            "malloc_live": (info.uordblks + info.hblkhd) / 2**20}


class StageSampler:
    def __init__(self) -> None:
        self.stack = ["start-up (imports)"]
        self.stages: dict[str, dict[str, float]] = {}
        self.high = 0.0
        self.owners: dict[str, object] = {}
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while True:
            now, stage = memory_mib(), self.stack[-1]
            seen = self.stages.setdefault(stage, {"raised_mib": 0.0})
            for key, value in now.items():
                seen[f"peak_{key}_mib"] = max(seen.get(f"peak_{key}_mib", 0.0), value)
            if now["rss"] > self.high:
                seen["raised_mib"] += now["rss"] - self.high
                self.high = now["rss"]
            time.sleep(0.001)

    def wrap(self, owner, name: str, stage: str) -> None:
        original = getattr(owner, name)

        def staged(*args, **kwargs):
            self.owners[stage] = args[0] if args else None  # the role, for tensor_mib
            self.stack.append(stage)
            try:
                return original(*args, **kwargs)
            finally:
                self.stack.pop()

        setattr(owner, name, staged)


def storage_mib(tensors) -> float:
    """MiB of the distinct storages behind ``tensors`` (views of one buffer counted once)."""
    seen = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values()) / 2**20


def tensor_mib(actor, rollout) -> dict[str, float]:
    """What the long-lived tensors hold after the run: the policy's weights, the gradients (as big as the
    trainable weights while an update runs: freed to None between updates), AdamW's state, and the
    rollout engine's own weights (its decoder's tensors that are not the policy's)."""
    params = list(actor.model.parameters())
    trainable = [p for p in params if p.requires_grad]
    optimizer = actor.engine.optimizer
    state = [v for per_param in optimizer.state.values() for v in per_param.values() if isinstance(v, torch.Tensor)]
    policy_ptrs = {p.untyped_storage().data_ptr() for p in params}
    decoder = getattr(rollout.engine, "decoder", None)
    engine_tensors = [t for t in vars(decoder).values() if isinstance(t, torch.Tensor)] if decoder else []
    for layer in getattr(decoder, "layers", []):
        engine_tensors += [t for t in layer.values() if isinstance(t, torch.Tensor)]
    own = [t for t in engine_tensors if t.untyped_storage().data_ptr() not in policy_ptrs]
    return {"policy_weights": round(storage_mib(params), 1), "gradients_during_update": round(storage_mib(trainable), 1),
            "optimizer_state": round(storage_mib(state), 1), "engine_weights": round(storage_mib(own), 1)}


def main() -> None:
    torch.set_num_threads(1)
    sampler = StageSampler()
    import rlxf.loops.rl as rl
    import rlxf.loops.rl_session as session
    from rlxf.checked_config import load_config
    from rlxf.roles.actor import ActorRole
    from rlxf.roles.rollout import RolloutRole

    for name in ("build_run_context", "load_policy", "build_rollout", "attach_lora", "place_trainers"):
        sampler.wrap(session, name, f"start: {name}")
    for owner, name, stage in ((rl, "sync_weights", "weight sync"), (ActorRole, "update", "policy update"),
                               (RolloutRole, "generate", "generation (rollouts and evaluation)"),
                               (ActorRole, "save_checkpoint", "checkpoint")):
        sampler.wrap(owner, name, stage)
    sampler.stack.append("other")
    args = sys.argv[1:]
    recipe = args.pop(0) if args and args[0].endswith((".yaml", ".yml")) else None
    summary = rl.train_rl(load_config(recipe, args), write=lambda _: None)
    time.sleep(0.01)
    emit({"recipe": recipe, "overrides": args, "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
          "eval_accuracy": [summary["initial_eval_accuracy"], summary["final_eval_accuracy"]],
          "tensor_mib": tensor_mib(sampler.owners["policy update"], sampler.owners["generation (rollouts and evaluation)"]),
          "stages": {stage: {k: round(v, 1) for k, v in seen.items()} for stage, seen in sampler.stages.items()}})


if __name__ == "__main__":
    main()
