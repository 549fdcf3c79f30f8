"""Do the engine's samplers give the same rollouts on a real model? Rewards and lengths of SmolLM2's samples
drawn by inverse CDF (the engine's sampler), by the exponential race it replaced and by ``torch.multinomial``.

    .venv/bin/python benchmarks/sampler_rollouts.py [--prompts 64] [--n 8] [--seeds 2]

The three draw from the same distribution (softmax of the logits at the sampling temperature), so a
policy sampled by each must reach the same reward and length distribution; only the random numbers
differ. ``tests/core/test_sampling.py`` checks the frequencies of single draws on small vocabularies;
this checks whole rollouts at the real-model recipe's shapes (``recipes/smollm2_grpo.yaml``: SmolLM2's
49,152-token vocabulary, the chat template, temperature 0.7, 40 new tokens, the ``math`` reward): per
sampler the mean reward and response length with their standard errors over prompts (a prompt's samples
are correlated), the truncated fraction and the mean sampled log-prob a token; and each sampler's
per-prompt mean reward paired against inverse CDF's (difference and its standard error). Each sampler
sees the same prompts with ``--seeds`` generator seeds each. ``torch.multinomial`` draws one sample on the
CPU by the same exponential race (argmax p / E from the generator), so its rollouts equal the race's token for
token: a check that the race arm is torch's own sampler, not an independent third draw.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import emit  # noqa: E402
from rl_step_vs_trl import MODES, settings  # noqa: E402
from rlxf.data.prompts import PromptStream  # noqa: E402
from rlxf.models.loading import load_causal_lm, load_tokenizer  # noqa: E402
from rlxf.rewards.math_answer import MathAnswerReward  # noqa: E402
from rlxf.roles.reward import RewardRole  # noqa: E402
from rlxf.roles.rollout import RolloutRole  # noqa: E402
from rlxf.rollout import sampling  # noqa: E402
from rlxf.rollout.engine import build_engine  # noqa: E402
from rlxf.rollout.sampling import SamplingParams  # noqa: E402


def exponential_race(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """argmax p_i / E_i with E_i ~ Exp(1): the engine's sampler before inverse CDF."""
    noise = torch.empty_like(probs).exponential_(generator=generator)
    return (probs / noise).argmax(-1)


def multinomial(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    return torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=generator).reshape(probs.shape[:-1])


SAMPLERS = {"inverse_cdf": sampling.inverse_cdf_sample, "exponential_race": exponential_race,
            "multinomial": multinomial}


def mean_and_se(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) / len(values) ** 0.5


def rollout_stats(role: RolloutRole, reward: RewardRole, rows: list[dict], params: SamplingParams, seeds: int,
                  chunk: int) -> dict[str, list[float]]:
    """Per prompt: mean reward, mean length, truncated fraction and mean sampled log-prob a token."""
    per_prompt: dict[str, list[float]] = {"reward": [], "length": [], "truncated": [], "log_prob": []}
    for start in range(0, len(rows), chunk):
        part = rows[start:start + chunk]
        totals = {key: [0.0] * len(part) for key in per_prompt}
        for seed in range(seeds):
            batch = role.generate(part, params, torch.Generator().manual_seed(seed * 100_003 + start))
            reward.score_batch(batch, role.decode_prompts(batch), role.decode_responses(batch))
            mask = batch.response_mask.float()
            lengths = mask.sum(1)
            log_prob = (batch.rollout_log_probs * mask).sum(1) / lengths.clamp(min=1)
            for row, group in enumerate(batch.group_ids.tolist()):
                totals["reward"][group] += float(batch.rewards[row])
                totals["length"][group] += float(lengths[row])
                totals["truncated"][group] += float(batch.truncated[row])
                totals["log_prob"][group] += float(log_prob[row])
        for key in per_prompt:
            per_prompt[key] += [t / (seeds * params.n) for t in totals[key]]
    return per_prompt


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=8, help="samples a prompt per seed")
    parser.add_argument("--seeds", type=int, default=2, help="generator seeds a sampler")
    parser.add_argument("--chunk", type=int, default=16, help="prompts a generate call (the recipe: 4)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--samplers", default=",".join(SAMPLERS))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    mode = MODES["smollm2"]
    recipe = settings(mode, argparse.Namespace(prompts=None, n=args.n, new=None, lr=None, micro=None))
    model_path = mode.model_path(recipe)
    tokenizer = load_tokenizer(model_path)
    model = load_causal_lm(model_path).eval()
    engine = build_engine("torch", model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    role = RolloutRole(engine, tokenizer, mode.chat_template, 256)
    reward = RewardRole(MathAnswerReward(), "math")
    rows = PromptStream(mode.splits().train, seed=0).take(args.prompts)
    params = SamplingParams(n=args.n, temperature=recipe.temperature, max_new_tokens=recipe.new)
    original = sampling.inverse_cdf_sample
    stats = {}
    try:
        for name in args.samplers.split(","):
            sampling.inverse_cdf_sample = SAMPLERS[name]  # sample_tokens looks it up at each call
            stats[name] = rollout_stats(role, reward, rows, params, args.seeds, args.chunk)
            print(name, {k: round(statistics.fmean(v), 4) for k, v in stats[name].items()}, file=sys.stderr, flush=True)
    finally:
        sampling.inverse_cdf_sample = original
    out = {}
    for name, per_prompt in stats.items():
        summary = {}
        for key, values in per_prompt.items():
            mean, se = mean_and_se(values)
            summary[key] = {"mean": round(mean, 4), "se": round(se, 4)}
        if name != "inverse_cdf" and "inverse_cdf" in stats:
            diff = [a - b for a, b in zip(per_prompt["reward"], stats["inverse_cdf"]["reward"])]
            mean, se = mean_and_se(diff)
            summary["reward_minus_inverse_cdf"] = {"mean": round(mean, 4), "se": round(se, 4),
                                                   "z": round(mean / se, 2) if se else None}
        out[name] = summary
    emit({"benchmark": "sampler_rollouts", "model": mode.label, "prompts": args.prompts,
          "samples_per_prompt": args.n * args.seeds, "temperature": recipe.temperature, "new_tokens": recipe.new,
          "threads": torch.get_num_threads(), "samplers": out})


if __name__ == "__main__":
    main()
