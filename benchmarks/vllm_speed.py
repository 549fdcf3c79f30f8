"""Rollout speed of vLLM (CPU build) vs rlxf's built-in engine vs HF ``generate``, and the weight-update time
per step, at the default recipe's sizes and on a randomly initialised ~100M-parameter Llama.

    VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind \\
      .venv-vllm/bin/python benchmarks/vllm_speed.py [--reps 5] [--threads 1] [--sizes default,100m]

Needs vLLM (``make setup-vllm`` builds .venv-vllm). Each size: the arithmetic task's prompts, ``--prompts``
prompts x ``--samples`` samples at temperature 1, up to ``--new`` tokens (the default recipe: 16 x 8, 6
tokens; the 100M model: 16 tokens). tokens/s counts generated tokens (EOS included, padding excluded),
from the median of interleaved runs. ``update_s``: one ``update_weights`` with the model's full state dict,
as every RL step does (vLLM: through its layer-wise reload and a re-pack of the CPU kernels; built-in: a
copy into its fused layout). ``startup_s``: building the engine (vLLM: saving the model, starting the
engine, its warm-up). Prints JSON.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import alternate, emit, median  # noqa: E402
from rlxf.data.arithmetic import arithmetic_task  # noqa: E402
from rlxf.models.loading import load_causal_lm, load_tokenizer  # noqa: E402
from rlxf.models.tiny import build_tiny_model  # noqa: E402
from rlxf.rollout.engine import build_engine  # noqa: E402
from rlxf.rollout.sampling import SamplingParams  # noqa: E402

# name -> (build_tiny_model arguments, max new tokens)
SIZES = {
    "default": ({}, 6),  # the default recipe's model (3.2M parameters) and budget
    "100m": ({"hidden_size": 768, "num_layers": 14, "num_heads": 12, "intermediate_size": 2048}, 16),
}
ENGINE_OPTIONS = {"torch": {}, "hf": {}, "vllm": {"enforce_eager": True, "max_model_len": 256}}


def measure(size: str, work: Path, args) -> dict:
    build_args, new_tokens = SIZES[size]
    path = build_tiny_model(work / size, **build_args)
    tokenizer = load_tokenizer(path)
    model = load_causal_lm(path).eval()
    rows = arithmetic_task(seed=0, eval_size=args.prompts, digits=3, b_digits=1).eval
    prompts = [tokenizer(r["prompt"], add_special_tokens=False)["input_ids"] for r in rows]
    params = SamplingParams(n=args.samples, temperature=1.0, max_new_tokens=args.new or new_tokens)
    engines, startup = {}, {}
    for name in args.engines:
        start = time.perf_counter()
        engines[name] = build_engine(name, model, tokenizer.eos_token_id, tokenizer.pad_token_id, ENGINE_OPTIONS[name])
        startup[name] = time.perf_counter() - start
    torch.set_num_threads(args.threads)  # after vLLM's start-up, which sets its own
    tokens: dict[str, int] = {}

    def generate(name):
        def run():
            gen = engines[name].generate(prompts, params, torch.Generator().manual_seed(0))
            tokens[name] = int(gen.response_mask.sum())
        return run

    seconds = alternate({name: generate(name) for name in engines}, args.reps)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    updatable = [name for name in engines if name != "hf"]  # HF generate decodes with the policy itself
    version = iter(range(1, 10**6))
    update = alternate({name: lambda name=name: engines[name].update_weights(state, next(version)) for name in updatable},
                       args.reps)
    result = {
        "model_parameters": sum(p.numel() for p in model.parameters()),
        "prompts": args.prompts, "samples": args.samples, "max_new_tokens": params.max_new_tokens,
    }
    for name in engines:
        result[name] = {
            "tokens_per_s": tokens[name] / median(seconds[name]), "median_s": median(seconds[name]),
            "tokens": tokens[name], "startup_s": startup[name],
            **({"update_s": median(update[name])} if name in update else {}),
        }
    for name in engines:
        close = getattr(engines[name], "close", None)
        if close:
            close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--new", type=int, default=0, help="max new tokens (0: the size's own)")
    parser.add_argument("--sizes", default="default,100m")
    parser.add_argument("--engines", default="vllm,torch,hf")
    args = parser.parse_args()
    args.engines = args.engines.split(",")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # vLLM logs to stdout, where the JSON goes
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="rlxf-vllm-bench-") as work:
        sizes = {size: measure(size, Path(work), args) for size in args.sizes.split(",")}
    emit({"benchmark": "vllm_speed", "threads": args.threads, "reps": args.reps, "sizes": sizes})


if __name__ == "__main__":
    main()
