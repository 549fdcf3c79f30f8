"""PPO's critic on SmolLM2-135M's architecture at the real-model recipe's batch: its value pass and its update
with each group's shared prompt through the trunk once (the default) against every row's prompt (the old path).

    .venv/bin/python benchmarks/critic_pass.py [--groups 4] [--samples 8] [--micro 8] [--prompt 50] \\
        [--response 32] [--reps 3] [--threads 1]

``--groups`` x ``--samples`` trajectories (recipes/smollm2_ppo.yaml: 4 prompts x 8 samples, micro-batches of 8,
whole groups in a micro-batch; its chat-templated prompts are ~50 tokens) on a randomly initialised
``LlamaForCausalLM`` of SmolLM2-135M's config (no download) under a ``ValueModel`` head. Two passes, as
``CriticRole`` runs them: ``values`` (no-grad, before the advantages) and ``update`` (forward + backward of
the value loss's values). The shapes alternate in one process after a warm-up; CPU seconds of this process
(medians), and the largest difference between the two paths' values (they must agree to float rounding).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import emit  # noqa: E402
from logprob_memory import SMOLLM2_135M  # noqa: E402
from train_pass_shapes import group_batch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=50)
    parser.add_argument("--response", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlxf.train import log_probs
    from rlxf.train.micro_batches import group_order, micro_batches
    from rlxf.train.value_model import ValueModel

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    critic = ValueModel(LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M, attn_implementation="sdpa")))
    torch.nn.init.normal_(critic.value_head.weight, std=0.02)
    batch = group_batch(args.groups, args.samples, args.prompt, args.response)
    micros = micro_batches(batch.select(group_order(batch)), args.micro)
    share_types = log_probs.SHARED_PREFIX_MODEL_TYPES

    def values(micro):
        return critic(micro.input_ids, micro.attention_mask, response_width=micro.response_ids.shape[1])

    def value_pass(share: bool) -> list[torch.Tensor]:
        log_probs.SHARED_PREFIX_MODEL_TYPES = share_types if share else frozenset()
        with torch.no_grad():
            return [values(m) * m.response_mask for m in micros]  # micro-batches are trimmed to their own width

    def update(share: bool) -> None:
        log_probs.SHARED_PREFIX_MODEL_TYPES = share_types if share else frozenset()
        critic.zero_grad(set_to_none=True)
        for micro in micros:
            ((values(micro) * micro.response_mask) ** 2).sum().div(batch.response_mask.sum()).backward()

    passes = {f"{name}_{path}": (fn, share) for name, fn in (("values", value_pass), ("update", update))
              for path, share in (("shared", True), ("plain", False))}
    seconds: dict[str, list[float]] = {name: [] for name in passes}
    for rep in range(1 + args.reps):
        for name, (fn, share) in passes.items():
            start = time.process_time()
            fn(share)
            if rep:
                seconds[name].append(time.process_time() - start)
    difference = max((a - b).abs().max().item() for a, b in zip(value_pass(True), value_pass(False)))
    log_probs.SHARED_PREFIX_MODEL_TYPES = share_types
    medians = {name: statistics.median(s) for name, s in seconds.items()}
    rows = args.groups * args.samples
    emit({
        "shape": {"trajectories": rows, "groups": args.groups, "micro_batch": args.micro, "prompt_tokens": args.prompt,
                  "response_tokens": args.response, "threads": args.threads, "reps": args.reps},
        "trunk_tokens": {"shared": args.groups * args.prompt + rows * (args.response - 1),
                         "plain": rows * (args.prompt + args.response)},
        "cpu_seconds": {name: round(v, 3) for name, v in medians.items()},
        "speedup_shared_vs_plain": {
            "values": round(medians["values_plain"] / medians["values_shared"], 2),
            "update": round(medians["update_plain"] / medians["update_shared"], 2),
        },
        "max_value_difference": difference,
    })


if __name__ == "__main__":
    main()
