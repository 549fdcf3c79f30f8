"""Peak memory and seconds of one micro-batch's log-prob passes, the plain LM head against the chunked
one (``train.logits_chunk_tokens``, train/chunked_head.py), on SmolLM2-135M's architecture.

    .venv/bin/python benchmarks/logprob_memory.py [--chunks 0,256] [--rows 16] [--prompt 50] \\
        [--response 35] [--samples-per-prompt 8] [--reps 2] [--threads 1]

The model is a randomly initialised ``LlamaForCausalLM`` of SmolLM2-135M's exact config (30 layers,
hidden 576, intermediate 1536, 9 query / 3 key-value heads, vocabulary 49,152, tied embeddings): no
download. A micro-batch holds ``--rows`` trajectories of ``--prompt`` + ``--response`` tokens, rows in
groups of ``--samples-per-prompt`` sharing their prompt (a GRPO group: the shared-prompt forward runs).
Two passes per chunk size, each in a fresh process so one variant's freed pages never hide another's:

* ``train``: the actor's loss pass (``response_token_log_probs`` with entropy for the metric, as
  ``ActorRole._loss`` calls it), forward + backward, gradients preallocated before the baseline;
* ``score``: the no-grad pass of the reference and old-policy log-probs (``batch_log_probs``' call).

Memory: the process's peak resident set (``VmHWM``, reset through ``/proc/self/clear_refs`` after the
model is built) minus its resident set just before, over a warm-up pass and ``--reps`` timed passes;
seconds: the median of the timed passes. ``logits_mb`` is the size of one fp32 copy of the logits the
plain path keeps (response positions only: rlxf never computed the prompt's). Ratios are chunked over
plain (``chunk 0``).
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

SMOLLM2_135M = dict(
    vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
    num_key_value_heads=3, max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0,
    tie_word_embeddings=True, pad_token_id=2, bos_token_id=1, eos_token_id=2,
)


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _batch(rows: int, prompt: int, response: int, group: int, vocab: int):
    import torch

    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, vocab, (max(1, rows // group), prompt), generator=g).repeat_interleave(group, 0)[:rows]
    responses = torch.randint(3, vocab, (rows, response), generator=g)
    ids = torch.cat([prompts, responses], 1)
    return ids, torch.ones_like(ids), responses, torch.ones_like(responses)


def measure(pass_name: str, chunk: int, args) -> dict:
    """One variant, in this (fresh) process."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlxf.train.log_probs import response_token_log_probs

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M))
    train = pass_name == "train"
    model.train(train).requires_grad_(train)
    if train:  # the gradients' memory is the same on both paths: allocate it before the baseline
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
    ids, mask, responses, response_mask = _batch(args.rows, args.prompt, args.response, args.samples_per_prompt,
                                                 SMOLLM2_135M["vocab_size"])

    def step() -> None:
        with torch.set_grad_enabled(train):
            log_p, entropy = response_token_log_probs(
                model, ids, mask, responses, response_mask, 1.0, with_entropy=train, entropy_grad=False,
                chunk_tokens=chunk,
            )
            if train:
                (-log_p.sum() / response_mask.sum()).backward()

    base_kb = _status_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    seconds = []
    for i in range(1 + args.reps):
        start = time.perf_counter()
        step()
        if i:
            seconds.append(time.perf_counter() - start)
    return {"peak_extra_mb": (_status_kb("VmHWM") - base_kb) / 1024, "base_mb": base_kb / 1024,
            "seconds": statistics.median(seconds), "all_seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", default="0,256", help="logits_chunk_tokens values; 0 = the plain path")
    parser.add_argument("--passes", default="train,score")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--prompt", type=int, default=50)
    parser.add_argument("--response", type=int, default=35)
    parser.add_argument("--samples-per-prompt", type=int, default=8)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", nargs=2, metavar=("PASS", "CHUNK"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], int(args.child[1]), args)))
        return
    chunks = [int(c) for c in args.chunks.split(",")]
    common = [f"--{k}={v}" for k, v in (("rows", args.rows), ("prompt", args.prompt), ("response", args.response),
                                         ("samples-per-prompt", args.samples_per_prompt), ("reps", args.reps),
                                         ("threads", args.threads))]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    results: dict[str, dict] = {}
    for pass_name in args.passes.split(","):
        for chunk in chunks:
            out = subprocess.run([sys.executable, __file__, "--child", pass_name, str(chunk), *common], env=env,
                                 check=True, capture_output=True, text=True).stdout
            results[f"{pass_name}/chunk{chunk}"] = json.loads(out.strip().splitlines()[-1])
    ratios = {}
    for key, value in results.items():
        pass_name, chunk = key.split("/")
        plain = results.get(f"{pass_name}/chunk0")
        if plain is not None and chunk != "chunk0":
            ratios[key] = {"peak_extra_memory": round(value["peak_extra_mb"] / plain["peak_extra_mb"], 3),
                           "seconds": round(value["seconds"] / plain["seconds"], 3)}
    tokens = args.rows * args.response
    emit({
        "model": "SmolLM2-135M architecture (random weights)", "config": SMOLLM2_135M,
        "micro_batch": {"rows": args.rows, "prompt": args.prompt, "response": args.response,
                        "samples_per_prompt": args.samples_per_prompt},
        "threads": args.threads, "reps": args.reps,
        "logits_mb": round(tokens * SMOLLM2_135M["vocab_size"] * 4 / 2**20, 1),
        "logits_mb_all_positions": round(args.rows * (args.prompt + args.response) * SMOLLM2_135M["vocab_size"] * 4
                                         / 2**20, 1),
        "results": {k: {**v, "peak_extra_mb": round(v["peak_extra_mb"], 1), "seconds": round(v["seconds"], 3)}
                    for k, v in results.items()},
        "ratios_vs_plain": ratios,
    })


if __name__ == "__main__":
    main()
