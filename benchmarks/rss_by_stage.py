"""Where an RL run's peak RSS comes from: memory sampled every millisecond, attributed to the stage running.

Stages are the run's own functions (start-up pieces, each rollout, update, weight sync, evaluation and
checkpoint), wrapped by name. Per stage: the most RSS seen (and its anonymous and file-backed parts),
the most heap in use by malloc (``mallinfo2``: live tensors and objects, without the freed memory glibc
keeps), and how far the stage raised the process's high-water mark (``raised_mib``: summed over the
run, these add up to the peak). Run once per arm, e.g. full vs LoRA (benchmarks/lora_vs_full.py):

    python benchmarks/rss_by_stage.py model.path=PATH sft.steps=0 train.steps=20 [model.lora.r=16 ...]
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
            self.stack.append(stage)
            try:
                return original(*args, **kwargs)
            finally:
                self.stack.pop()

        setattr(owner, name, staged)


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
    summary = rl.train_rl(load_config(None, sys.argv[1:]), write=lambda _: None)
    time.sleep(0.01)
    emit({"overrides": sys.argv[1:], "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
          "eval_accuracy": [summary["initial_eval_accuracy"], summary["final_eval_accuracy"]],
          "stages": {stage: {k: round(v, 1) for k, v in seen.items()} for stage, seen in sampler.stages.items()}})


if __name__ == "__main__":
    main()
