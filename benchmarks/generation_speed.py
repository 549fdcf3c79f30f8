"""Generation throughput of rlxf's built-in engine vs HF ``generate``, same model, prompts and settings.

    .venv/bin/python benchmarks/generation_speed.py [--batch 64] [--new 16] [--reps 7] [--threads 2]

The model is the default recipe's tiny Llama (3.2M parameters, built locally). Both engines sample
``--batch`` responses of up to ``--new`` tokens at temperature 1 with a KV cache and stop rows at
end-of-sequence. tokens/s counts generated tokens (the EOS included, padding excluded). Prints JSON
with the median seconds of interleaved runs and the speed ratio.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import alternate, emit, median  # noqa: E402
from rlxf.data.arithmetic import arithmetic_task  # noqa: E402
from rlxf.models.loading import load_causal_lm, load_tokenizer, resolve_model_path  # noqa: E402
from rlxf.rollout.engine import build_engine  # noqa: E402
from rlxf.rollout.sampling import SamplingParams  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--new", type=int, default=16)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--model", default="tiny:default")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    path = resolve_model_path(args.model)
    tokenizer = load_tokenizer(path)
    model = load_causal_lm(path).eval()
    rows = arithmetic_task(seed=0, eval_size=args.batch, digits=3, b_digits=1).eval
    prompts = [tokenizer(r["prompt"], add_special_tokens=False)["input_ids"] for r in rows]
    params = SamplingParams(n=1, temperature=1.0, max_new_tokens=args.new)
    engines = {name: build_engine(name, model, tokenizer.eos_token_id, tokenizer.pad_token_id) for name in ("torch", "hf")}
    tokens: dict[str, int] = {}

    def runner(name):
        def run():
            gen = engines[name].generate(prompts, params, torch.Generator().manual_seed(0))
            tokens[name] = int(gen.response_mask.sum())
        return run

    seconds = alternate({name: runner(name) for name in engines}, args.reps)
    speed = {name: tokens[name] / median(seconds[name]) for name in engines}
    emit({
        "benchmark": "generation_speed",
        "model_parameters": sum(p.numel() for p in model.parameters()),
        "batch": args.batch, "max_new_tokens": args.new, "threads": torch.get_num_threads(),
        "rlxf_torch_engine": {"median_s": median(seconds["torch"]), "tokens": tokens["torch"], "tokens_per_s": speed["torch"]},
        "hf_generate": {"median_s": median(seconds["hf"]), "tokens": tokens["hf"], "tokens_per_s": speed["hf"]},
        "speedup_vs_hf_generate": speed["torch"] / speed["hf"],
    })


if __name__ == "__main__":
    main()
