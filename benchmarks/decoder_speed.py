"""Decode throughput: HF generate vs HFDecoder loop vs LlamaDecoder loop on a tiny char-level Llama.

    .venv/bin/python benchmarks/decoder_speed.py [--batch 64] [--new 16] [--threads N] [--device cpu|cuda]

Prints one JSON object. tokens/s counts generated tokens (batch * new), prefill included; "tokens_per_s" is the
best of ``--reps`` interleaved runs (robust to background load on a shared box), "tokens_per_s_median" the median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rlxf.rollout.decoders import HFDecoder, LlamaDecoder

sys.path.insert(0, str(Path(__file__).parent))
from common import alternate  # noqa: E402


def tiny_llama(vocab: int, device, dtype) -> LlamaForCausalLM:
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).to(device=device, dtype=dtype).eval()


def make_prompts(batch: int, vocab: int, device, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(8, 33, (batch,), generator=g)
    p = int(lens.max())
    ids = torch.zeros(batch, p, dtype=torch.long)
    mask = torch.zeros(batch, p, dtype=torch.long)
    for i, n in enumerate(lens.tolist()):
        ids[i, p - n :] = torch.randint(1, vocab, (n,), generator=g)
        mask[i, p - n :] = 1
    return ids.to(device), mask.to(device)


def sample(logits: torch.Tensor, greedy: bool, temperature: float = 1.0) -> torch.Tensor:
    if greedy:
        return logits.argmax(-1)
    return torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1).squeeze(-1)


@torch.inference_mode()
def decoder_loop(dec, ids, mask, new: int, greedy: bool) -> torch.Tensor:
    out = torch.empty(ids.shape[0], new, dtype=torch.long, device=ids.device)
    logits = dec.prefill(ids, mask, new)
    for t in range(new):
        tok = sample(logits, greedy)
        out[:, t] = tok
        if t + 1 < new:
            logits = dec.step(tok)
    return out


@torch.inference_mode()
def hf_generate(model, ids, mask, new: int, greedy: bool) -> torch.Tensor:
    kw = {"do_sample": False} if greedy else {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=new,
        min_new_tokens=new,
        pad_token_id=0,
        use_cache=True,
        **kw,
    )
    return out[:, ids.shape[1] :]


def time_interleaved(fns: dict, reps: int, sync) -> dict[str, dict[str, float]]:
    """Best and median seconds of round-robin runs (benchmarks/common.alternate)."""
    times = alternate(fns, reps, sync=sync)
    return {k: {"best": min(v), "median": statistics.median(v)} for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--new", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave torch's default)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--no-bf16", action="store_true", help="skip the extra bf16 LlamaDecoder row")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    model = tiny_llama(args.vocab, device, dtype)
    n_params = sum(p.numel() for p in model.parameters())
    ids, mask = make_prompts(args.batch, args.vocab, device)
    hf_dec = HFDecoder(model)
    ll_dec = LlamaDecoder.from_hf(model)
    # informational extra row: same weights run in bf16 (different numerics than the fp32 HF baseline)
    bf_dec = (
        None
        if (args.no_bf16 or dtype == torch.bfloat16)
        else LlamaDecoder.from_hf(model, dtype=torch.bfloat16)
    )
    n_tok = args.batch * args.new

    # sanity: greedy outputs agree between the three paths
    with torch.inference_mode():
        g_hf = hf_generate(model, ids, mask, args.new, True)
        g_d1 = decoder_loop(hf_dec, ids, mask, args.new, True)
        g_d2 = decoder_loop(ll_dec, ids, mask, args.new, True)
    agree = {
        "hf_decoder_vs_generate": float((g_d1 == g_hf).float().mean()),
        "llama_decoder_vs_generate": float((g_d2 == g_hf).float().mean()),
    }

    results = {}
    for mode, greedy in (("greedy", True), ("sampled", False)):
        fns = {
            "hf_generate": lambda g=greedy: hf_generate(model, ids, mask, args.new, g),
            "hf_decoder_loop": lambda g=greedy: decoder_loop(hf_dec, ids, mask, args.new, g),
            "llama_decoder_loop": lambda g=greedy: decoder_loop(ll_dec, ids, mask, args.new, g),
        }
        if bf_dec is not None:
            fns["llama_decoder_loop_bf16"] = lambda g=greedy: decoder_loop(bf_dec, ids, mask, args.new, g)
        t = time_interleaved(fns, args.reps, sync)
        best = {k: n_tok / v["best"] for k, v in t.items()}
        med = {k: n_tok / v["median"] for k, v in t.items()}
        results[mode] = {
            "tokens_per_s": {k: round(v, 1) for k, v in best.items()},
            "ratio_vs_hf_generate": {
                k: round(v / best["hf_generate"], 2) for k, v in best.items() if k != "hf_generate"
            },
            "tokens_per_s_median": {k: round(v, 1) for k, v in med.items()},
        }
    print(
        json.dumps(
            {
                "device": str(device),
                "dtype": args.dtype,
                "torch_threads": torch.get_num_threads(),
                "params": n_params,
                "batch": args.batch,
                "prompt_len_max": ids.shape[1],
                "new_tokens": args.new,
                "greedy_token_agreement": agree,
                **results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
