"""``loop: online_dpo`` — DPO on pairs sampled from the *current* policy and labelled by the recipe's
reward (a verifier, a reward model, a judge), as OpenRLHF's iterative DPO and TRL's online DPO do.

Each optimizer step takes ``preference.batch_size`` prompts from the task's training rows, samples
``rollout.n_samples`` (at least 2) responses to each with the rollout engine, scores them with
``reward``, and pairs the best-scored response with the worst when their scores differ (a prompt whose
samples all score the same gives no pair: ``train/tied_prompts``). The pairs are trained with the DPO
family's loss (``preference.loss``) against a frozen reference, the start policy (after the ``sft``
warm-up), saved in ``RUN_DIR/reference/``. Pairs are kept as the engine's token ids: nothing is
re-tokenized. ``train/pairs`` counts the labelled pairs of a step, ``train/labelled_pairs`` all so far,
so that a run can be compared with offline DPO at an equal number of labelled pairs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch

from rlxf.algos import preference_loss
from rlxf.config import Config
from rlxf.loops import LOOPS
from rlxf.loops.dpo import LENGTH_NORMALISED, pair_log_probs
from rlxf.loops.offline import Objective, run_offline, task_evaluator, warm_start_policy
from rlxf.loops.setup import RunContext, build_rollout, load_policy
from rlxf.models.saving import save_model
from rlxf.rollout.sampling import SamplingParams


def best_and_worst(scores: list[float], group_size: int) -> tuple[list[int], list[int], int]:
    """Per group of ``group_size`` consecutive samples: the index of the highest score (first on ties)
    and of the lowest (last on ties), for groups whose scores differ; and how many groups tied."""
    chosen, rejected, tied = [], [], 0
    for start in range(0, len(scores), group_size):
        group = scores[start: start + group_size]
        hi, lo = max(group), min(group)
        if hi == lo:
            tied += 1
            continue
        chosen.append(start + group.index(hi))
        rejected.append(start + len(group) - 1 - group[::-1].index(lo))
    return chosen, rejected, tied


def _labelled_so_far(run_dir: Path, checkpoint: Path | None) -> float:
    """On resume, the pairs labelled up to the checkpoint's step (from ``metrics.jsonl``)."""
    if checkpoint is None or not (run_dir / "metrics.jsonl").exists():
        return 0.0
    step = json.loads((checkpoint / "state.json").read_text())["step"]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    done = [r["train/labelled_pairs"] for r in rows if "train/labelled_pairs" in r and r.get("step", 0) <= step]
    return float(done[-1]) if done else 0.0


def online_dpo_objective(config: Config, context: RunContext, checkpoint: Path | None, run_dir: Path, write,
                         stop=None) -> Objective:
    cfg = config.preference.loss
    if config.rollout.n_samples < 2:
        raise ValueError("online_dpo needs rollout.n_samples >= 2 (a pair is two samples of one prompt)")
    reference_dir = run_dir / "reference"
    if checkpoint:
        policy = load_policy(config, str(checkpoint / "policy"), context.device)
    else:
        policy = warm_start_policy(config, context, write, stop)
        save_model(policy, reference_dir)
    reference = load_policy(config, str(reference_dir), context.device).requires_grad_(False).eval()
    rollout = build_rollout(config, policy, context.tokenizer)
    params = SamplingParams(n=config.rollout.n_samples, temperature=config.rollout.temperature,
                            top_p=config.rollout.top_p, max_new_tokens=config.rollout.max_new_tokens)
    length_normalised = cfg.name in LENGTH_NORMALISED
    micro = config.preference.micro_batch_size
    counts = {"pairs": 0.0, "tied_prompts": 0.0, "labelled_pairs": _labelled_so_far(run_dir, checkpoint)}
    version = [0]

    def label_pairs(rows: list[dict]):
        version[0] += 1
        rollout.update_weights(policy.state_dict(), version=version[0])
        batch = rollout.generate(rows, params)
        out = context.reward.score(rollout.decode_prompts(batch), rollout.decode_responses(batch), batch.metadata)
        chosen, rejected, tied = best_and_worst(list(out.scores), params.n)
        return batch, chosen, rejected, tied

    def step_inputs(rows: list[dict]):
        batch, chosen, rejected, tied = label_pairs(rows)
        counts.update(pairs=float(len(chosen)), tied_prompts=float(tied),
                      labelled_pairs=counts["labelled_pairs"] + len(chosen))
        chunks = []
        for i in range(0, len(chosen), micro):
            pairs = batch.select(chosen[i: i + micro] + rejected[i: i + micro])
            with torch.no_grad():
                ref = pair_log_probs(reference, pairs, length_normalised)[:2] if cfg.uses_reference else (None, None)
            chunks.append((pairs, ref))

        def loss_of(chunk):
            pairs, (ref_chosen, ref_rejected) = chunk
            pair = pair_log_probs(policy, pairs, length_normalised)
            loss, metrics = preference_loss(cfg, pair.chosen, pair.rejected, ref_chosen, ref_rejected, pair.chosen_nll)
            return loss * (len(pair.chosen) / len(chosen)), metrics

        return chunks, loss_of

    task_eval = task_evaluator(config, context, policy)
    return Objective(
        model=policy, optim=config.preference.optim, rows=context.task.train, steps=config.preference.steps,
        batch_size=config.preference.batch_size, step_inputs=step_inputs, evaluate=task_eval,
        step_metrics=lambda: dict(counts),
    )


@LOOPS.register("online_dpo")
def train_online_dpo(config: Config, resume: bool = False, write: Callable[[str], None] = print) -> dict:
    return run_offline(config, online_dpo_objective, resume, write)
