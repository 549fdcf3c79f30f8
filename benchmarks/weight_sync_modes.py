"""Bytes and seconds per weight sync with each ``runtime.weight_sync.mode`` on a real model, against full sync.

    RLXF_CACHE_DIR=/tmp/rlxfcache .venv/bin/python benchmarks/weight_sync_modes.py \\
        [--model smollm2:135m-instruct] [--reps 3] [--transport object_store] [--lr 1e-6] [--cases full_ft,lora]

The policy (fp32) lives in an ``ActorRole`` in this process, the rollout engine is the built-in torch
engine (its Llama decoder copies every tensor it is sent into its fused weights), and each sync is the
loop's own ``sync_weights`` over ``--transport``, no checksum. Between two syncs one AdamW step runs on
random gradients of unit scale (what a trained tensor sees: every element moves, by about ``lr``); it
is not timed. Cases:

* ``full_ft``: every parameter trains; modes ``full`` and ``delta``.
* ``full_ft_frozen_embeddings``: the (tied) embedding is frozen, the rest trains; ``full`` and ``delta``.
* ``lora``: r 16, alpha 32, every linear (the real-model LoRA recipe's adapter); ``full`` (merged
  weights) and ``adapter``.

Per case and mode: megabytes and seconds per sync (median over ``--reps`` syncs after the first, which
sends everything in every mode), the ratios to the case's ``full`` mode, and for full fine-tuning the
fraction of the weights' elements whose bits changed in one step (what an exact element-sparse or XOR
encoding could at best skip).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import emit  # noqa: E402


def build_actor(model: torch.nn.Module, lora: bool, freeze_embeddings: bool, lr: float):
    from rlxf.algos import AlgorithmConfig
    from rlxf.config import OptimConfig
    from rlxf.models.lora import apply_lora
    from rlxf.models.lora_config import LoraConfig
    from rlxf.roles.actor import ActorRole

    model = copy.deepcopy(model).requires_grad_(True)
    if lora:
        model = apply_lora(model, LoraConfig(r=16, alpha=32.0, target_modules="all-linear"))
    if freeze_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    actor = ActorRole(model, OptimConfig(lr=lr), AlgorithmConfig(), 8, 8, 1.0)
    trained = [p for p in model.parameters() if p.requires_grad]
    return actor, torch.optim.AdamW(trained, lr=lr, weight_decay=0.0)


def adam_step(model: torch.nn.Module, optim: torch.optim.Optimizer, generator: torch.Generator) -> None:
    for p in model.parameters():
        if p.requires_grad:
            p.grad = torch.randn(p.shape, generator=generator).to(p.device)
    optim.step()
    optim.zero_grad(set_to_none=True)


def changed_fraction(before: dict[str, torch.Tensor], model: torch.nn.Module) -> float:
    after = model.state_dict()
    changed = sum(int((before[n].view(torch.int32) != after[n].view(torch.int32)).sum()) for n in before)
    return changed / sum(t.numel() for t in before.values())


def run_mode(model, case: dict, mode: str, args) -> dict:
    from rlxf.roles.rollout import RolloutRole
    from rlxf.rollout.engine import build_engine
    from rlxf.runtime.config import WeightSyncConfig
    from rlxf.runtime.weight_sync import sync_weights

    actor, optim = build_actor(model, case["lora"], case["freeze_embeddings"], args.lr)
    engine = build_engine("torch", copy.deepcopy(model), 2, 2, {})
    rollout = RolloutRole(engine, tokenizer=None, chat_template=False, max_prompt_tokens=0)
    cfg = WeightSyncConfig(transport=args.transport, mode=mode)
    generator = torch.Generator().manual_seed(0)
    first = sync_weights(actor, rollout, 1, cfg)
    seconds, megabytes, fractions = [], [], []
    for version in range(2, args.reps + 2):
        before = None if case["lora"] or version > 2 else {n: t.clone() for n, t in actor.model.state_dict().items()}
        adam_step(actor.model, optim, generator)
        if before is not None:
            fractions.append(changed_fraction(before, actor.model))
            del before
        start = time.perf_counter()
        metrics = sync_weights(actor, rollout, version, cfg)
        seconds.append(time.perf_counter() - start)
        megabytes.append(metrics["weight_sync/megabytes"])
    out = {"first_sync_megabytes": round(first["weight_sync/megabytes"], 2),
           "megabytes_per_sync": round(statistics.median(megabytes), 2),
           "seconds_per_sync": round(statistics.median(seconds), 3)}
    if fractions:
        out["elements_changed_by_one_adam_step"] = round(fractions[0], 4)
    return out


CASES = {
    "full_ft": {"lora": False, "freeze_embeddings": False, "modes": ("full", "delta")},
    "full_ft_frozen_embeddings": {"lora": False, "freeze_embeddings": True, "modes": ("full", "delta")},
    "lora": {"lora": True, "freeze_embeddings": False, "modes": ("full", "adapter")},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2:135m-instruct")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--transport", default="object_store")
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    torch.set_num_threads(1)

    from rlxf.models.loading import load_causal_lm

    model = load_causal_lm(args.model, dtype="float32")
    result: dict = {"model": args.model, "parameters": sum(p.numel() for p in model.parameters()),
                    "transport": args.transport, "lr": args.lr, "reps": args.reps, "threads": 1, "cases": {}}
    for name in args.cases.split(","):
        case = CASES[name]
        rows = {mode: run_mode(model, case, mode, args) for mode in case["modes"]}
        full = rows["full"]
        for row in rows.values():
            row["bytes_ratio_vs_full"] = round(row["megabytes_per_sync"] / full["megabytes_per_sync"], 4)
            row["seconds_ratio_vs_full"] = round(row["seconds_per_sync"] / full["seconds_per_sync"], 3)
        result["cases"][name] = rows
        print(name, rows, file=sys.stderr, flush=True)
    emit(result)


if __name__ == "__main__":
    main()
