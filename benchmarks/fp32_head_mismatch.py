"""Rollout/trainer mismatch of a bf16 torch engine with and without ``rollout.engine_options.fp32_lm_head``.

    .venv/bin/python benchmarks/fp32_head_mismatch.py [--model tiny] [--seeds 3] [--prompts 8] [--n 2] \\
        [--max-new-tokens 24] [--decoders llama,hf] [--threads 1]

The trainer is the fp32 policy itself (``train/log_probs.py``'s ``sequence_log_probs`` of the engine's
samples); the mismatch is ``algos/mismatch_metrics.py``'s, per engine variant and seed: the mean and max
of |delta log p| over the response tokens and the k3 estimate of KL(rollout || trainer). Variants: the
fp32 engine (the floor: float rounding only), the bf16 engine, the bf16 engine with the fp32 LM head.
``--model``: ``tiny`` (rlxf's default tiny Llama, randomly initialised) or a local model folder (with a
tokenizer: the prompts are a few fixed sentences; otherwise random token ids). Each variant samples
its own tokens (same seed), so the rows differ between variants; the means are over ``--seeds``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import emit  # noqa: E402

SENTENCES = [
    "The capital of France is", "def fibonacci(n):\n", "Water boils at a temperature of",
    "Once upon a time, in a small village,", "The derivative of x squared is", "import numpy as np\n",
    "The three primary colors are", "To make a cup of tea, first",
]
VARIANTS = {"fp32": {}, "bf16": {"dtype": "bfloat16"}, "bf16_fp32_head": {"dtype": "bfloat16", "fp32_lm_head": True}}


def _load(model_arg: str):
    from rlxf.models.loading import load_causal_lm, load_tokenizer
    from rlxf.models.tiny import build_tiny_model

    path = model_arg
    if model_arg == "tiny":
        path = str(build_tiny_model(Path(tempfile.mkdtemp(prefix="rlxf-tiny-")) / "tiny"))
    model = load_causal_lm(path, "float32").eval()
    try:
        tokenizer = load_tokenizer(path)
    except (OSError, ValueError):
        tokenizer = None
    return model, tokenizer


def _prompts(tokenizer, vocab: int, count: int, seed: int) -> list[list[int]]:
    import torch

    if tokenizer is not None and vocab > 1000:  # a real model: real text
        return [tokenizer(SENTENCES[i % len(SENTENCES)])["input_ids"] for i in range(count)]
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (4 + i % 5,), generator=g).tolist() for i in range(count)]


def measure(model, tokenizer, options: dict, seed: int, args) -> dict[str, float]:
    import torch

    from rlxf.algos.mismatch_metrics import mismatch_metrics
    from rlxf.batch import left_pad
    from rlxf.rollout.engine import build_engine
    from rlxf.rollout.sampling import SamplingParams
    from rlxf.train.log_probs import sequence_log_probs

    eos, pad = model.config.eos_token_id, model.config.pad_token_id or 0
    engine = build_engine("torch", model, eos, pad, options)
    prompts = _prompts(tokenizer, model.config.vocab_size, args.prompts, seed)
    params = SamplingParams(n=args.n, temperature=1.0, max_new_tokens=args.max_new_tokens)
    gen = engine.generate(prompts, params, torch.Generator().manual_seed(seed))
    ids, mask = left_pad(prompts, pad, torch.device("cpu"))
    rows = gen.prompt_index
    with torch.no_grad():
        trainer, _ = sequence_log_probs(model, ids[rows], mask[rows], gen.response_ids, gen.response_mask)
    m = mismatch_metrics(trainer, gen.log_probs, gen.response_mask)
    return {k: m[k] for k in ("rollout_log_prob_diff", "rollout_log_prob_diff_max", "rollout_kl_k3")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--decoders", default="llama,hf")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    model, tokenizer = _load(args.model)
    result: dict = {"model": args.model, "seeds": args.seeds, "rows": args.prompts * args.n,
                    "max_new_tokens": args.max_new_tokens, "decoders": {}}
    for decoder in args.decoders.split(","):
        table = {}
        for name, options in VARIANTS.items():
            runs = [measure(model, tokenizer, {**options, "decoder": decoder}, s, args) for s in range(args.seeds)]
            table[name] = {k: statistics.mean(r[k] for r in runs) for k in runs[0]}
            table[name]["rollout_log_prob_diff_per_seed"] = [r["rollout_log_prob_diff"] for r in runs]
        bf16, head = table["bf16"]["rollout_log_prob_diff"], table["bf16_fp32_head"]["rollout_log_prob_diff"]
        table["fp32_head_over_bf16"] = head / bf16 if bf16 else None
        result["decoders"][decoder] = table
    emit(result)


if __name__ == "__main__":
    main()
