"""Where the training pass's time goes, by kind of operation, and what one autocast region per mini-batch buys: the
packed update on SmolLM2-135M's architecture at the real-model recipe's batch, in fp32 or under bf16 autocast.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/train_pass_profile.py [--dtype bfloat16|float32] [--warmup 4] [--reps 3]

The update is ``train_pass_shapes.py``'s ``whole_groups_packed`` shape (4 groups of 8 trajectories, a 35-token
prompt, responses of up to 32 tokens, micro-batches of 8, the actor's loss call with entropy), in two arms:

* ``before``: an autocast region around each micro-batch's forward: each weight cast to bf16 once per micro-batch;
* ``engine``: one autocast region over the mini-batch, backward with autocast paused, as
  ``TrainEngine.optimizer_step`` runs it now (each weight cast once per optimizer step; the same gradients).

In fp32 the two arms run the same code (no casts): their ratio is the measurement's noise.

After ``--warmup`` updates of each arm (freed memory reused, no page faults left) the arms alternate ``--reps``
times without the profiler (CPU seconds of this process, medians); then ``before`` and ``engine`` are profiled
once each with ``torch.profiler``. The profile's self CPU time is summed by kind: the matrix products of the
decoder and of the tied LM head, attention (forward and backward), dtype casts (``copy_`` of weights and
gradients), the embedding matrix's dense gradient (zeroing and summing the [vocab, hidden] tensor), log-softmax
and entropy over the vocabulary, and the rest (elementwise ops, norms, autograd bookkeeping). The profiler
slows allocation-heavy ops on the [vocab, hidden] tensors (its own allocations keep freed pages from being
reused), so the shares are of the profiled update and the unprofiled seconds are what the pass costs.

"vs matmul" is ``6 x params x computed positions`` (as ``train_pass_shapes.py`` counts them) over the update's
seconds at the same process's matmul rate in that dtype; "needed for 70%" is the update time that rate
would need, set beside what the matrix products and attention alone took in the profile.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import emit  # noqa: E402
from logprob_memory import SMOLLM2_135M  # noqa: E402
from train_pass_shapes import group_batch, matmul_rate  # noqa: E402

VOCAB_TENSOR = str(SMOLLM2_135M["vocab_size"])  # marks ops on the [vocab, ...] tensors in recorded shapes

# op name -> kind; ops on the vocabulary-sized tensors are told apart below
KINDS = {
    "aten::mm": "matmul", "aten::bmm": "matmul", "aten::addmm": "matmul",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": "attention",
    "aten::_efficient_attention_forward": "attention", "aten::_efficient_attention_backward": "attention",
    "aten::copy_": "casts and copies", "aten::_to_copy": "casts and copies",
    "aten::_log_softmax": "log-softmax and entropy", "aten::_log_softmax_backward_data": "log-softmax and entropy",
    "aten::_softmax": "log-softmax and entropy", "aten::exp": "log-softmax and entropy",
}
EMBEDDING_GRADIENT_OPS = {"aten::fill_", "aten::add_", "aten::index_add_", "aten::scatter_add_", "aten::copy_"}


def kind_of(name: str, shapes: str) -> str:
    on_vocab = VOCAB_TENSOR in shapes
    if on_vocab and name == "aten::mm":
        return "LM head matmul"
    if on_vocab and name in EMBEDDING_GRADIENT_OPS:
        return "embedding gradient (dense [vocab, hidden])"
    if on_vocab and name not in KINDS:
        return "log-softmax and entropy"
    return KINDS.get(name, "rest")


ARMS = {"before": False, "engine": True}  # name -> one autocast region over the mini-batch


def shares(prof) -> tuple[Counter, Counter]:
    by_kind, calls = Counter(), Counter()
    for event in prof.key_averages(group_by_input_shape=True):
        kind = kind_of(event.key, str(event.input_shapes))
        by_kind[kind] += event.self_cpu_time_total / 1e6
        calls[kind] += event.count
    return by_kind, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlxf.train import log_probs
    from rlxf.train.micro_batches import group_order, micro_batches
    from rlxf.train.precision import autocast, autocast_paused

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M, attn_implementation="sdpa"))
    batch = group_batch(4, 8, 35, 32)
    micros = micro_batches(batch.select(group_order(batch)), 8)
    dtype = None if args.dtype == "float32" else args.dtype
    positions = {"body": 0, "head": 0}
    model.model.register_forward_pre_hook(
        lambda _m, _a, kwargs: positions.__setitem__("body", positions["body"] + kwargs["input_ids"].numel()),
        with_kwargs=True)
    model.lm_head.register_forward_pre_hook(
        lambda _m, a: positions.__setitem__("head", positions["head"] + a[0].shape[:-1].numel()))

    def update(one_region: bool) -> None:
        # the engine's loop (train/engine.py) and, for "before", the loop it replaced
        model.zero_grad(set_to_none=True)
        with autocast(model, dtype) if one_region else contextlib.nullcontext():
            for micro in micros:
                with contextlib.nullcontext() if one_region else autocast(model, dtype):
                    lp, _ = log_probs.response_token_log_probs(
                        model, micro.input_ids, micro.attention_mask, micro.response_ids, micro.loss_mask, 0.7,
                        with_entropy=True, entropy_grad=False, chunk_tokens=0)
                    loss = lp.sum() / batch.loss_mask.sum()
                with autocast_paused(model) if one_region else contextlib.nullcontext():
                    loss.backward()

    update(ARMS["before"])
    computed = dict(positions)
    for _ in range(args.warmup):
        for arm in ARMS.values():
            update(arm)
    seconds = {name: [] for name in ARMS}
    for _ in range(args.reps):
        for name, arm in ARMS.items():
            start = time.process_time()
            update(arm)
            seconds[name].append(time.process_time() - start)
    profiles = {}
    for name in ("before", "engine"):
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            update(ARMS[name])
        profiles[name] = shares(prof)

    params = sum(p.numel() for p in model.parameters())
    head = SMOLLM2_135M["vocab_size"] * SMOLLM2_135M["hidden_size"]
    flop = 6 * (params - head) * computed["body"] + 6 * head * computed["head"]
    rate = matmul_rate(torch.float32 if dtype is None else torch.bfloat16)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    out = {
        "benchmark": "train_pass_profile", "dtype": args.dtype, "threads": args.threads, "reps": args.reps,
        "decoder_positions": computed["body"], "head_positions": computed["head"],
        "matmul_gflops": round(rate / 1e9, 1), "seconds_needed_for_70_percent": round(flop / (0.7 * rate), 3),
        "update_cpu_seconds": {name: round(value, 3) for name, value in median.items()},
        "speedup_vs_before": {name: round(median["before"] / value, 3) for name, value in median.items()},
        "vs_matmul_computed_tokens": {name: round(flop / value / rate, 3) for name, value in median.items()},
        "all_update_cpu_seconds": {name: [round(v, 3) for v in values] for name, values in seconds.items()},
        "profiles": {},
    }
    for name, (by_kind, calls) in profiles.items():
        profiled = sum(by_kind.values())
        matmul_seconds = by_kind["matmul"] + by_kind["LM head matmul"]
        out["profiles"][name] = {
            "profiled_update_cpu_seconds": round(profiled, 3),
            # the matrix products' and attention's own profiled seconds (compute-bound: the profiler barely
            # slows them, unlike the allocation-heavy ops on [vocab, hidden] tensors)
            "matmul_and_attention_seconds": round(matmul_seconds + by_kind["attention"], 3),
            "matmul_rate_in_the_pass": round(flop / matmul_seconds / rate, 3),
            "share_of_profiled_update": {k: round(v / profiled, 3) for k, v in by_kind.most_common()},
            "profiled_seconds": {k: round(v, 3) for k, v in by_kind.most_common()},
            "calls": dict(calls.most_common()),
        }
    emit(out)


if __name__ == "__main__":
    main()
