"""The actor's training pass on SmolLM2-135M's architecture at the real-model recipe's batch, shape by shape:
which rows share a micro-batch, bf16 autocast, the chunked LM head, freed memory kept mapped or not.

    .venv/bin/python benchmarks/train_pass_shapes.py [--groups 4] [--samples 8] [--micro 8] [--prompt 35] \\
        [--response 32] [--reps 2] [--threads 1] [--freed-memory both|kept] [--shapes whole_groups,...]

One update's forward + backward over ``--groups`` x ``--samples`` trajectories (a GRPO step of
recipes/smollm2_grpo.yaml: 4 prompts x 8 samples, micro-batches of 8) with the policy-loss call the actor
makes (``response_token_log_probs``, entropy for the metric), on a randomly initialised ``LlamaForCausalLM``
of SmolLM2-135M's config (no download). Responses have random lengths up to ``--response``. Shapes:

* ``plain``: every row's prompt through the model (the shared-prompt forward off), the exact reference;
* ``length_sorted``: the shared-prompt forward on micro-batches of rows sorted by response length (the
  update's order before micro-batches held whole groups): each micro-batch mixes several groups;
* ``whole_groups``: micro-batches of whole groups (``train/micro_batches.group_order``, the default);
* ``whole_groups_packed``: the same micro-batches packed (train/packed_responses.py: each group one sequence,
  its prompt once and its responses back to back, no padding; the default now where it computes less);
* ``whole_groups`` and ``whole_groups_packed`` with ``bf16`` autocast (``train.optim.autocast``), the packed one
  also with the chunked head (``train.logits_chunk_tokens=256``);
* ``whole_groups_chunked`` and ``whole_groups_packed_chunked``: fp32 with the chunked head, for long responses
  (``--response 256 --shapes ...``), where a micro-batch's full logits take gigabytes.
The shapes before packing run with packing off (``log_probs.PACKED_MODEL_TYPES`` emptied).

The shapes alternate in one process (``--reps`` after a warm-up); CPU seconds (this process's, so a
competing load costs less than in wall time) and wall seconds are medians. The whole set runs twice, in
two fresh processes: with rlxf's default of keeping freed memory mapped (rlxf/freed_memory.py) and with
``RLXF_KEEP_FREED_MEMORY=0``. FLOP/s: 6 x params x tokens over CPU seconds, against the same process's fp32 and bf16 matmul rate,
counted on all trajectories' tokens (prompt + response of every row) and on what the pass computes: the
positions each decoder forward ran over (counted by a hook in the warm-up pass: distinct prompts, padded or
packed responses) and the positions the tied LM head ran over (the loss tokens when chunked).
``--freed-memory kept`` runs the first process only; ``--shapes`` a subset (the speedups are then against
``whole_groups`` and ``plain`` where given, else against the first shape).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import emit  # noqa: E402
from logprob_memory import SMOLLM2_135M  # noqa: E402

SHAPES = {
    "plain": dict(order="groups", share=False),
    "length_sorted": dict(order="length", share=True),
    "whole_groups": dict(order="groups", share=True),
    "whole_groups_packed": dict(order="groups", share=True, pack=True),
    "whole_groups_bf16": dict(order="groups", share=True, bf16=True),
    "whole_groups_packed_bf16": dict(order="groups", share=True, pack=True, bf16=True),
    "whole_groups_packed_bf16_chunked": dict(order="groups", share=True, pack=True, bf16=True, chunk=256),
    # long responses (--response 256): the [tokens, vocab] logits of a micro-batch no longer fit beside the rest
    "whole_groups_chunked": dict(order="groups", share=True, chunk=256),
    "whole_groups_packed_chunked": dict(order="groups", share=True, pack=True, chunk=256),
}


def matmul_rate(dtype, size: int = 2048, reps: int = 3) -> float:
    import torch

    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b
    start = time.process_time()
    for _ in range(reps):
        a @ b
    return reps * 2 * size**3 / (time.process_time() - start)


def group_batch(groups: int, samples: int, prompt: int, response: int):
    """``groups`` random prompts of ``prompt`` tokens, each with ``samples`` responses of random lengths up to
    ``response`` (EOS-padded), SmolLM2's vocabulary; seeded."""
    import torch

    from rlxf.batch import TrajectoryBatch

    vocab, rows = SMOLLM2_135M["vocab_size"], groups * samples
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, vocab, (groups, prompt), generator=g).repeat_interleave(samples, 0)
    lengths = torch.randint(max(1, response // 3), response + 1, (rows,), generator=g)
    response_mask = (torch.arange(response)[None] < lengths[:, None]).long()
    return TrajectoryBatch(
        prompt_ids=prompts, prompt_mask=torch.ones_like(prompts),
        response_ids=torch.randint(3, vocab, (rows, response), generator=g) * response_mask + 2 * (1 - response_mask),
        response_mask=response_mask, loss_mask=response_mask.float(),
        group_ids=torch.arange(groups).repeat_interleave(samples),
    )


def child(args) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import rlxf
    from rlxf.train import log_probs
    from rlxf.train.micro_batches import group_order, micro_batches
    from rlxf.train.precision import autocast

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M, attn_implementation="sdpa"))
    rows = args.groups * args.samples
    batch = group_batch(args.groups, args.samples, args.prompt, args.response)
    orders = {"groups": group_order(batch), "length": torch.argsort(batch.response_lengths, stable=True)}
    micros = {name: micro_batches(batch.select(order), args.micro) for name, order in orders.items()}
    share_types, pack_types = log_probs.SHARED_PREFIX_MODEL_TYPES, log_probs.PACKED_MODEL_TYPES
    counted = {"body": 0, "head": 0}  # positions through the decoder and through the head module

    def count_body(_module, _args, kwargs):
        counted["body"] += kwargs["input_ids"].numel()

    def count_head(_module, args):
        counted["head"] += args[0].shape[:-1].numel()

    model.model.register_forward_pre_hook(count_body, with_kwargs=True)
    model.lm_head.register_forward_pre_hook(count_head)

    def update(order: str, share: bool, pack: bool = False, bf16: bool = False, chunk: int = 0) -> None:
        log_probs.SHARED_PREFIX_MODEL_TYPES = share_types if share else frozenset()
        log_probs.PACKED_MODEL_TYPES = pack_types if pack else frozenset()
        model.zero_grad(set_to_none=True)
        for micro in micros[order]:
            with autocast(model, "bfloat16" if bf16 else None):
                lp, _ = log_probs.response_token_log_probs(
                    model, micro.input_ids, micro.attention_mask, micro.response_ids, micro.loss_mask, 0.7,
                    with_entropy=True, entropy_grad=False, chunk_tokens=chunk)
                loss = lp.sum() / batch.loss_mask.sum()
            loss.backward()

    shapes = {name: SHAPES[name] for name in args.shapes.split(",")}
    cpu = {name: [] for name in shapes}
    wall = {name: [] for name in shapes}
    computed = {}
    for rep in range(1 + args.reps):
        for name, shape in shapes.items():
            counted.update(body=0, head=0)
            start_cpu, start_wall = time.process_time(), time.perf_counter()
            update(**shape)
            if not rep:  # the chunked head runs on the loss tokens, outside the head module
                head = int(batch.loss_mask.sum()) if shape.get("chunk") else counted["head"]
                computed[name] = (counted["body"], head)
            if rep:
                cpu[name].append(time.process_time() - start_cpu)
                wall[name].append(time.perf_counter() - start_wall)
    with open("/proc/self/status") as f:
        peak_mb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    params = sum(p.numel() for p in model.parameters())
    head = SMOLLM2_135M["vocab_size"] * SMOLLM2_135M["hidden_size"]
    all_tokens = rows * args.prompt + int(batch.response_mask.sum())

    fp32, bf16 = matmul_rate(torch.float32), matmul_rate(torch.bfloat16)
    out = {"keeps_freed_memory": rlxf.KEEPS_FREED_MEMORY, "peak_rss_mb": round(peak_mb), "matmul_gflops":
           {"fp32": round(fp32 / 1e9, 1), "bf16": round(bf16 / 1e9, 1)}, "all_tokens": all_tokens, "shapes": {}}
    for name, shape in shapes.items():
        seconds = statistics.median(cpu[name])
        body, head_positions = computed[name]
        # the tied head runs on response positions only; the rest of the model on every computed token
        flop = 6 * (params - head) * body + 6 * head * head_positions
        rate = bf16 if shape.get("bf16") else fp32
        out["shapes"][name] = {
            "cpu_seconds": round(seconds, 2), "wall_seconds": round(statistics.median(wall[name]), 2),
            "computed_tokens": body, "head_positions": head_positions,
            "vs_matmul_computed_tokens": round(flop / seconds / rate, 3),
            "vs_fp32_matmul_all_tokens": round(6 * params * all_tokens / seconds / fp32, 3),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=35)
    parser.add_argument("--response", type=int, default=32)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated subset of: " + ", ".join(SHAPES))
    parser.add_argument("--freed-memory", choices=("both", "kept"), default="both",
                        help="kept: only the process that keeps freed memory mapped (rlxf's default)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    unknown = set(args.shapes.split(",")) - set(SHAPES)
    if unknown:
        parser.error(f"--shapes: unknown {', '.join(sorted(unknown))} (known: {', '.join(SHAPES)})")
    if args.child:
        print(json.dumps(child(args)))
        return
    forwarded = [a for a in sys.argv[1:]]
    results = {}
    for keep in ("1", "0") if args.freed_memory == "both" else ("1",):
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "RLXF_KEEP_FREED_MEMORY": keep}
        out = subprocess.run([sys.executable, __file__, "--child", *forwarded], env=env, check=True,
                             capture_output=True, text=True).stdout
        results["keep_freed_memory" if keep == "1" else "release_freed_memory"] = json.loads(out.strip().splitlines()[-1])
    kept = results["keep_freed_memory"]["shapes"]
    first = next(iter(kept))
    reference = kept.get("whole_groups", kept[first])["cpu_seconds"]  # the update's shape before packing
    plain = kept.get("plain", kept[first])["cpu_seconds"]
    emit({
        "benchmark": "train_pass_shapes", "model": "SmolLM2-135M architecture (random weights)",
        "batch": {"groups": args.groups, "samples": args.samples, "micro_batch": args.micro, "prompt": args.prompt,
                  "max_response": args.response},
        "threads": args.threads, "reps": args.reps, **results,
        # against whole_groups and plain where --shapes has them, else against the first shape given
        "speedup_vs_whole_groups_fp32": {name: round(reference / s["cpu_seconds"], 2) for name, s in kept.items()},
        "speedup_vs_plain": {name: round(plain / s["cpu_seconds"], 2) for name, s in kept.items()},
    })


if __name__ == "__main__":
    main()
