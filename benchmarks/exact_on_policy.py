"""What exact on-policy (``rollout.engine_options.batch_invariant``) costs: generation tokens/s and the
trainer's old-log-prob pass, the default path vs the batch-invariant one, alternated in one process.

    .venv/bin/python benchmarks/exact_on_policy.py [--model tiny] [--prompts 8] [--n 4] \\
        [--max-new-tokens 32] [--reps 3] [--threads 1]

``--model``: ``tiny`` (rlxf's default tiny Llama, random), ``smollm2_shaped`` (SmolLM2-135M's shape,
30 layers, random weights), or anything ``model.path`` takes (``smollm2:135m-instruct``, a folder).
Default path: the fast ``LlamaDecoder`` and the model's own forward (``train/log_probs.py``); exact path:
``ExactDecoder`` and ``train/exact_log_probs.py``. Also reported: the max |delta log p| between the
engine's and the trainer's log-probs of the same tokens in each mode (exact: 0.0). Medians over
``--reps``; ratios are exact / default seconds (generation: default / exact tokens per second).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import alternate, emit, median  # noqa: E402


def _model(name: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlxf.models.loading import load_causal_lm
    from rlxf.models.tiny import build_tiny_model

    if name == "smollm2_shaped":
        config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                             num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True,
                             rope_theta=100000.0, max_position_embeddings=2048, rms_norm_eps=1e-5)
        torch.manual_seed(0)
        return LlamaForCausalLM(config).eval()
    path = str(build_tiny_model(Path(tempfile.mkdtemp(prefix="rlxf-tiny-")) / "tiny")) if name == "tiny" else name
    return load_causal_lm(path, "float32").eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch

    from rlxf.batch import left_pad
    from rlxf.models.batch_invariant.llama import InvariantLlama
    from rlxf.rollout.engine import build_engine
    from rlxf.rollout.sampling import SamplingParams
    from rlxf.train.exact_log_probs import exact_sequence_log_probs
    from rlxf.train.log_probs import sequence_log_probs

    torch.set_num_threads(args.threads)
    model = _model(args.model)
    vocab, eos = model.config.vocab_size, -1  # no stop token: every row decodes the whole budget
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, vocab, (8 + 5 * i,), generator=g).tolist() for i in range(args.prompts)]
    params = SamplingParams(n=args.n, max_new_tokens=args.max_new_tokens)
    engines = {mode: build_engine("torch", model, eos, 0, {"batch_invariant": mode == "exact"})
               for mode in ("default", "exact")}
    generations = {}

    def generate(mode):
        generations[mode] = engines[mode].generate(prompts, params, torch.Generator().manual_seed(1))

    gen_seconds = alternate({mode: (lambda m=mode: generate(m)) for mode in engines}, args.reps)
    net = InvariantLlama.of(model.config, model.state_dict())
    trainer_passes = {
        "default": lambda gen: sequence_log_probs(model, *_prompt_rows(left_pad, prompts, gen), gen.response_ids,
                                                  gen.response_mask)[0],
        "exact": lambda gen: exact_sequence_log_probs(net, *_prompt_rows(left_pad, prompts, gen), gen.response_ids,
                                                      gen.response_mask),
    }
    with torch.no_grad():
        pass_seconds = alternate({m: (lambda m=m: trainer_passes[m](generations["default"])) for m in engines},
                                 args.reps)
        mismatch = {m: float((trainer_passes[m](generations[m]) - generations[m].log_probs).abs().max())
                    for m in engines}
    tokens = int(generations["default"].response_mask.sum())
    result = {"model": args.model, "threads": args.threads, "rows": args.prompts * args.n,
              "max_new_tokens": args.max_new_tokens, "reps": args.reps, "generated_tokens": tokens,
              "max_abs_log_prob_diff": mismatch}
    for mode in engines:
        result[mode] = {"generation_tokens_per_s": tokens / median(gen_seconds[mode]),
                        "log_prob_pass_s": median(pass_seconds[mode]), "generation_s": median(gen_seconds[mode])}
    result["generation_slowdown"] = result["exact"]["generation_s"] / result["default"]["generation_s"]
    result["log_prob_pass_slowdown"] = result["exact"]["log_prob_pass_s"] / result["default"]["log_prob_pass_s"]
    emit(result)


def _prompt_rows(left_pad, prompts, generation):
    import torch

    return left_pad([prompts[i] for i in generation.prompt_index.tolist()], 0, torch.device("cpu"))


if __name__ == "__main__":
    main()
