"""rlxf's GRPO update against TRL's ``GRPOTrainer`` loss on one identical batch: is it the same update?

    .venv/bin/python benchmarks/grpo_update_vs_trl.py [--mode smollm2] [--batches 3] [--seed 0]

``benchmarks/rl_step_vs_trl.py`` compares the two systems' held-out accuracy after the same number
of samples, but each samples its own completions, so a difference there mixes sampling noise with
any difference in the update. This script removes the sampling: rlxf's rollout samples a batch
(the mode's prompts, chat template, temperature and reward), and both systems compute the gradient
of their GRPO loss on exactly those tokens from the same initial weights:

* rlxf: ``ActorRole.update`` as the RL loop runs it (micro-batches holding whole groups, the shared
  prompt computed once, packed responses, the chunked LM head), stopped before the optimizer step;
* TRL: ``GRPOTrainer.compute_loss`` on the same rows in its own layout (left-padded prompts,
  right-padded completions, the whole sequence through its model), one backward per micro-batch
  of ``--micro`` rows with TRL's gradient-accumulation normaliser, as its training loop calls it.

Two comparisons per batch: with rlxf's advantages fed to both (the loss and backward alone), and
with each system's own advantages (both divide by the Bessel-corrected group std; TRL adds 1e-4 to it,
rlxf 1e-6). Printed: the cosine between the two gradients, their relative L2 difference, both norms,
and the cosine of the weight change after the clipped Adam step each system would take. Needs the ``bench`` extra (trl).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import emit  # noqa: E402
from rl_step_vs_trl import MODES, NO_EOS, RlxfGRPO, TrlGRPO, settings  # noqa: E402
from rlxf.algos import compute_advantages, token_rewards_from_scores  # noqa: E402
from rlxf.data.prompts import PromptStream  # noqa: E402
from rlxf.models.loading import load_tokenizer  # noqa: E402


def rlxf_gradient(system: RlxfGRPO, batch) -> dict[str, torch.Tensor]:
    """The summed gradient of rlxf's mini-batch loss (before clipping), the weights left unchanged."""
    captured: dict[str, torch.Tensor] = {}
    engine = system.actor.engine

    def capture() -> float:
        for name, p in system.model.named_parameters():
            captured[name] = p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
        return 0.0  # no clip and no optimizer step: the next batch starts from the same weights

    original, engine._update = engine._update, capture
    try:
        system.actor.update(batch, torch.Generator().manual_seed(0))
    finally:
        engine._update = original
    return captured


def trl_advantages(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """TRL's ``scale_rewards="group"``: (r - group mean) / (Bessel-corrected group std + 1e-4)."""
    out = torch.empty_like(rewards)
    for g in group_ids.unique():
        rows = group_ids == g
        r = rewards[rows]
        out[rows] = (r - r.mean()) / (r.std() + 1e-4)
    return out


def trl_gradient(trl: TrlGRPO, batch, advantages: torch.Tensor, micro: int) -> dict[str, torch.Tensor]:
    """The gradient TRL's training loop accumulates over the batch's micro-batches of ``micro`` rows."""
    trainer, model = trl.trainer, trl.trainer.model
    model.train()
    model.zero_grad(set_to_none=True)
    steps = math.ceil(len(batch) / micro)
    trainer.current_gradient_accumulation_steps = steps
    for start in range(0, len(batch), micro):
        rows = slice(start, start + micro)
        inputs = {
            "prompt_ids": batch.prompt_ids[rows], "prompt_mask": batch.prompt_mask[rows],
            "completion_ids": batch.response_ids[rows], "completion_mask": batch.response_mask[rows],
            "advantages": advantages[rows],
        }
        trainer.compute_loss(model, inputs).backward()
    return {name: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
            for name, p in model.named_parameters()}


def compare(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], lr: float, clip: float, eps: float = 1e-8) -> dict:
    """Cosine, relative L2 difference and norms of two gradients, and the cosine of the weight change of
    AdamW's first step (bias-corrected: ``-lr * g / (|g| + eps)``) after each is clipped to norm ``clip``.
    Sums run a tensor at a time (a flattened fp64 copy of SmolLM2's gradient alone is 1 GB)."""
    names = list(a)

    def total(f) -> float:
        return sum(float(f(a[n].double(), b[n].double())) for n in names)

    aa, bb, ab = total(lambda x, _: (x * x).sum()), total(lambda _, y: (y * y).sum()), total(lambda x, y: (x * y).sum())
    diff = total(lambda x, y: ((x - y) ** 2).sum())
    scale_a, scale_b = min(1.0, clip / (aa ** 0.5 + 1e-6)), min(1.0, clip / (bb ** 0.5 + 1e-6))

    def adam(g, scale):
        return -lr * g * scale / (g.abs() * scale + eps)

    sa = total(lambda x, _: (adam(x, scale_a) ** 2).sum())
    sb = total(lambda _, y: (adam(y, scale_b) ** 2).sum())
    sab = total(lambda x, y: (adam(x, scale_a) * adam(y, scale_b)).sum())
    return {
        "grad_cosine": round(ab / (aa * bb) ** 0.5, 7) if aa and bb else 0.0,
        "grad_relative_l2_difference": float(f"{(diff / bb) ** 0.5:.3g}") if bb else None,
        "rlxf_grad_norm": round(aa ** 0.5, 5),
        "trl_grad_norm": round(bb ** 0.5, 5),
        "adam_step_cosine": round(sab / (sa * sb) ** 0.5, 7) if sa and sb else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=list(MODES), default="smollm2")
    parser.add_argument("--batches", type=int, default=3, help="sampled batches compared (each from the same weights)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    for key in ("prompts", "n", "new", "lr", "micro", "sft_steps"):
        setattr(args, key, getattr(args, key, None) if key != "sft_steps" else 300)
    args.warmup, args.steps = 0, args.batches
    mode = MODES[args.mode]
    args = settings(mode, args)
    model_path = mode.model_path(args)
    # batches whose every group got one reward carry no gradient: up to 5x as many are sampled to find some
    tries = 5 * args.batches
    rows = PromptStream(mode.splits().train, seed=args.seed).take(tries * args.prompts)
    eos_id = load_tokenizer(model_path).eos_token_id if mode.stops_at_eos else NO_EOS
    rlxf = RlxfGRPO(model_path, args, eos_id, rows, mode)
    results = []
    with tempfile.TemporaryDirectory() as out_dir:
        trl = TrlGRPO(model_path, args, not mode.stops_at_eos, rows, out_dir, mode)
        assert [n for n, _ in rlxf.model.named_parameters()] == [n for n, _ in trl.trainer.model.named_parameters()]
        sampled = 0
        while len(results) < args.batches and sampled < tries:
            sampled += 1
            batch = rlxf.rollout.generate(rlxf.stream.take(args.prompts), rlxf.params, rlxf.sample_gen)
            rlxf.reward.score_batch(batch, rlxf.rollout.decode_prompts(batch), rlxf.rollout.decode_responses(batch))
            batch.token_rewards = token_rewards_from_scores(batch.rewards, batch.loss_mask)
            batch.advantages, batch.returns = compute_advantages(rlxf.algo, batch.token_rewards, batch.loss_mask,
                                                                 batch.group_ids)
            # GRPO's advantage is one number a row, on each of its response tokens
            row_adv = batch.advantages[:, 0].clone()
            if not row_adv.any():
                continue
            g_rlxf = rlxf_gradient(rlxf, batch)
            g_trl_same = trl_gradient(trl, batch, row_adv, args.micro)
            g_trl_own = trl_gradient(trl, batch, trl_advantages(batch.rewards.float(), batch.group_ids), args.micro)
            results.append({
                "batch": sampled - 1,
                "reward_mean": round(float(batch.rewards.float().mean()), 4),
                "rows_with_nonzero_advantage": int((row_adv != 0).sum()),
                "response_tokens": int(batch.response_mask.sum()),
                "same_advantages": compare(g_rlxf, g_trl_same, args.lr, 1.0),
                "own_advantages": compare(g_rlxf, g_trl_own, args.lr, 1.0),
            })
            print(results[-1], file=sys.stderr, flush=True)
    emit({"benchmark": "grpo_update_vs_trl", "mode": args.mode, "model": mode.label, "seed": args.seed,
          "settings": {k: getattr(args, k) for k in ("prompts", "n", "new", "lr", "micro", "temperature")},
          "threads": torch.get_num_threads(), "batches_sampled": sampled, "batches": results})


if __name__ == "__main__":
    main()
