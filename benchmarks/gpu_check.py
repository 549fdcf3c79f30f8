"""A prepared GPU check: one script, under 8 minutes on one H100/H200, only torch + transformers
(+ pytest for the CUDA-marked tests). Prints JSON.

1. ``cuda_tests``: the CUDA-marked tests (``pytest -k cuda``): counts and exit code.
2. ``generation``: rlxf's built-in engine vs HF ``generate`` on a randomly initialised Qwen2 of
   Qwen2.5-0.5B's shape (~0.5B parameters) in bf16: tokens/s of each, the ratio; and greedy parity
   (tokens equal, log-prob max difference) in fp32 on a slice of the batch.
3. ``rl_step``: a run of the default algorithm (GRPO) at that size: seconds per stage of the
   measured step (the second; the first warms up), peak device memory.
4. ``log_prob_agreement``: bf16 rollout log-probs vs the bf16 trainer's recomputation (and both vs
   fp32) on sampled responses: max and mean absolute differences.

    python benchmarks/gpu_check.py            # on a GPU machine
    python benchmarks/gpu_check.py --tiny     # a tiny model on the CPU: the same code end to end (tests)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).parent))
from common import emit  # noqa: E402
from rlxf.batch import left_pad  # noqa: E402
from rlxf.rollout.engine import build_engine  # noqa: E402
from rlxf.rollout.sampling import SamplingParams  # noqa: E402
from rlxf.train.log_probs import sequence_log_probs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# Qwen2.5-0.5B's shape (494M parameters with tied embeddings); --tiny keeps the architecture
FULL = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
            num_key_value_heads=2, vocab_size=151936, max_position_embeddings=4096)
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=512, max_position_embeddings=256)
SIZES = {  # batch, prompt tokens, new tokens, RL prompts per step, samples per prompt
    "full": dict(batch=64, prompt=64, new=128, rl_prompts=16, rl_samples=8, rl_new=64, reps=3),
    "tiny": dict(batch=4, prompt=8, new=8, rl_prompts=2, rl_samples=2, rl_new=4, reps=1),
}


def random_qwen2(shape: dict, dtype: torch.dtype, device: str) -> torch.nn.Module:
    config = transformers.Qwen2Config(**shape, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.Qwen2ForCausalLM(config)
    return model.to(dtype).eval()


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def cuda_tests() -> dict:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "cuda", "tests/rollout"],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    return {"exit_code": done.returncode, "summary": (done.stdout.strip().splitlines() or [""])[-1],
            "seconds": round(time.perf_counter() - start, 1)}


def random_prompts(count: int, length: int, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    # ragged lengths: left padding is exercised
    return [torch.randint(3, vocab, (length - (i % 4),), generator=g).tolist() for i in range(count)]


def generation(shape: dict, size: dict, device: str) -> dict:
    model = random_qwen2(shape, torch.bfloat16, device)
    prompts = random_prompts(size["batch"], size["prompt"], shape["vocab_size"])
    params = SamplingParams(n=1, temperature=1.0, max_new_tokens=size["new"])
    speed = {}
    for name in ("torch", "hf"):
        engine = build_engine(name, model, -1, 0)  # no stop token: every row runs the whole budget
        engine.generate(prompts, params, torch.Generator(device=device).manual_seed(0))  # warm-up
        sync(device)
        start = time.perf_counter()
        for rep in range(size["reps"]):
            engine.generate(prompts, params, torch.Generator(device=device).manual_seed(rep))
        sync(device)
        speed[name] = size["reps"] * len(prompts) * size["new"] / (time.perf_counter() - start)
    params_count = sum(p.numel() for p in model.parameters())
    del model
    return {"parameters": params_count, "dtype": "bfloat16", "batch": len(prompts), "new_tokens": size["new"],
            "torch_tokens_per_s": round(speed["torch"], 1), "hf_tokens_per_s": round(speed["hf"], 1),
            "torch_over_hf": round(speed["torch"] / speed["hf"], 3), "fp32_parity": fp32_parity(shape, prompts, device)}


def fp32_parity(shape: dict, prompts: list[list[int]], device: str) -> dict:
    """Greedy tokens of the built-in engine vs HF generate, log-probs vs the trainer's forward, fp32."""
    model = random_qwen2(shape, torch.float32, device)
    prompts, params = prompts[:8], SamplingParams(n=1, temperature=0.0, max_new_tokens=16)
    ours = build_engine("torch", model, -1, 0).generate(prompts, params)
    reference = build_engine("hf", model, -1, 0).generate(prompts, params)
    ids, mask = left_pad(prompts, 0, torch.device(device))
    with torch.no_grad():
        trainer, _ = sequence_log_probs(model, ids, mask, ours.response_ids.to(device), ours.response_mask.to(device))
    return {"greedy_tokens_equal": bool(torch.equal(ours.response_ids, reference.response_ids)),
            "log_prob_max_diff": float((ours.log_probs - trainer.cpu()).abs().max())}


def log_prob_agreement(shape: dict, size: dict, device: str) -> dict:
    """bf16 rollout vs bf16 trainer on sampled responses; each against fp32."""
    model = random_qwen2(shape, torch.bfloat16, device)
    prompts = random_prompts(size["batch"], size["prompt"], shape["vocab_size"])
    gen = build_engine("torch", model, -1, 0).generate(
        prompts, SamplingParams(n=1, temperature=1.0, max_new_tokens=size["new"]), torch.Generator(device=device).manual_seed(0))
    ids, mask = left_pad(prompts, 0, torch.device(device))
    response, response_mask = gen.response_ids.to(device), gen.response_mask.to(device)
    with torch.no_grad():
        trainer_bf16 = sequence_log_probs(model, ids, mask, response, response_mask)[0].float().cpu()
        trainer_fp32 = sequence_log_probs(model.float(), ids, mask, response, response_mask)[0].cpu()
    keep = gen.response_mask.bool()

    def diff(a, b) -> dict:
        d = (a - b).abs()[keep]
        return {"max": round(float(d.max()), 5), "mean": round(float(d.mean()), 6)}

    return {"tokens": int(keep.sum()), "rollout_bf16_vs_trainer_bf16": diff(gen.log_probs, trainer_bf16),
            "rollout_bf16_vs_fp32": diff(gen.log_probs, trainer_fp32), "trainer_bf16_vs_fp32": diff(trainer_bf16, trainer_fp32)}


def rl_step(shape: dict, size: dict, device: str, work: Path) -> dict:
    """Two GRPO steps of the default algorithm at ``shape`` (bf16 weights); the second is reported."""
    from rlxf.checked_config import load_config
    from rlxf.loops.rl import train_rl
    from rlxf.models.char_tokenizer import build_char_tokenizer

    model_dir = work / "model"
    random_qwen2(shape, torch.bfloat16, "cpu").save_pretrained(model_dir)
    build_char_tokenizer().save_pretrained(model_dir)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    overrides = [
        f"run_dir={work / 'run'}", f"model.path={model_dir}", f"model.device={device}", "train.steps=2",
        f"train.prompts_per_step={size['rl_prompts']}", f"rollout.n_samples={size['rl_samples']}",
        f"rollout.max_new_tokens={size['rl_new']}", "sft.steps=0", "data.eval_size=8", "eval.every=0",
        "checkpoint.every=0", "logging.progress_bar=false", "logging.sinks=[jsonl]",
        f"train.mini_batch_size={size['rl_prompts'] * size['rl_samples']}",
        f"train.micro_batch_size={max(1, size['rl_prompts'] * size['rl_samples'] // 4)}",
    ]
    train_rl(load_config(None, overrides), write=lambda _: None)
    rows = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    measured = rows[-1]
    return {"algorithm": "grpo", "samples": size["rl_prompts"] * size["rl_samples"], "new_tokens": size["rl_new"],
            "stages_s": {k: round(v, 3) for k, v in measured.items() if k.startswith("time/")},
            "peak_device_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device == "cuda" else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny model on the CPU (the test suite runs this)")
    parser.add_argument("--skip-tests", action="store_true", help="leave out the CUDA-marked tests")
    args = parser.parse_args()
    shape, size = (TINY, SIZES["tiny"]) if args.tiny else (FULL, SIZES["full"])
    device = "cpu" if args.tiny else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device (use --tiny for the CPU run)")
    start = time.perf_counter()
    result = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "torch": torch.__version__,
              "transformers": transformers.__version__}
    if not args.skip_tests:
        result["cuda_tests"] = cuda_tests()
    result["generation"] = generation(shape, size, device)
    result["log_prob_agreement"] = log_prob_agreement(shape, size, device)
    with tempfile.TemporaryDirectory() as work:
        result["rl_step"] = rl_step(shape, size, device, Path(work))
    result["total_s"] = round(time.perf_counter() - start, 1)
    emit(result)


if __name__ == "__main__":
    main()
