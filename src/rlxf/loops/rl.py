"""The synchronous (on-policy) RL controller: a plain loop over the roles.

    prompts -> n rollouts each -> rewards -> reference / old-policy / critic forward passes
    -> advantages -> PPO epochs over mini-batches -> weight update into the rollout engine
    -> periodic held-out evaluation -> checkpoint

Every stage is timed (``time/<stage>`` metrics). The loop only calls role methods, so the roles can
live in this process or behind actor handles.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import torch

from rlxf.algos import (
    apply_kl_to_rewards,
    compute_advantages,
    kl_controller_from_config,
    kl_per_token,
    token_rewards_from_scores,
)
from rlxf.algos.masked import masked_mean
from rlxf.batch import TrajectoryBatch
from rlxf.config import Config, dump_config
from rlxf.data.prompts import PromptStream
from rlxf.eval.accuracy import evaluate
from rlxf.loops import LOOPS
from rlxf.loops.dynamic_sampling import fill_batch
from rlxf.loops.greedy_baseline import greedy_baseline_rewards, needs_greedy_baseline
from rlxf.loops.overlong import filter_overlong, shape_overlong_rewards
from rlxf.loops.run_state import RunState, load_run_state, load_trainer_states, save_checkpoint
from rlxf.loops.setup import (
    build_basics,
    build_rollout,
    frozen_copy,
    load_policy,
    sampling_params,
)
from rlxf.loops.sft import run_sft
from rlxf.loops.summary import write_summary
from rlxf.models.value_head import ValueModel
from rlxf.rewards.monitors import build_monitor
from rlxf.roles.actor import ActorRole
from rlxf.roles.critic import CriticRole
from rlxf.roles.reference import ReferenceRole
from rlxf.runtime import build_runtime
from rlxf.runtime.weight_sync import sync_weights
from rlxf.tracking.metrics import MetricsLogger
from rlxf.train.checkpoint import latest_checkpoint
from rlxf.train.ppo_batches import needs_old_log_probs


class StageTimer:
    """``with timer("generation"): ...`` adds ``time/generation`` (seconds) to this step's metrics."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str):
        start = time.perf_counter()
        yield
        self.seconds[f"time/{stage}"] = self.seconds.get(f"time/{stage}", 0.0) + time.perf_counter() - start


def mean_of(history: list[dict[str, float]], prefix: str) -> dict[str, float]:
    keys = history[0].keys() if history else ()
    return {f"{prefix}/{k}": sum(h[k] for h in history) / len(history) for k in keys}


def prepare_run_dir(run_dir: Path, resume: bool, write: Callable[[str], None]) -> None:
    if not resume and run_dir.exists() and any(run_dir.iterdir()):
        moved = run_dir.with_name(f"{run_dir.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.move(str(run_dir), moved)
        write(f"moved the previous run in {run_dir} to {moved}")
    run_dir.mkdir(parents=True, exist_ok=True)


def train_on_batch(
    batch: TrajectoryBatch, algo, actor, critic, reference, kl_control, shuffle_gen: torch.Generator,
    on_policy_reuse: bool, timer: StageTimer, metrics: dict[str, float],
) -> None:
    """The trainer's half of a step on a scored batch (shared with loops/rl_async.py): reference /
    old-policy / critic passes, advantages, the policy (and critic) updates. Fills ``batch`` and
    ``metrics`` in place."""
    mask = batch.loss_mask
    if reference is not None:
        with timer("ref_log_probs"):
            batch.ref_log_probs = reference.compute_log_probs(batch)
        kl = masked_mean(kl_per_token(algo.kl_estimator, batch.rollout_log_probs, batch.ref_log_probs), mask)
        metrics["policy/kl"] = float(kl)
    if not on_policy_reuse:
        with timer("old_log_probs"):
            batch.old_log_probs = actor.compute_log_probs(batch)
    if critic is not None:
        with timer("values"):
            batch.values = critic.compute_values(batch)
    with timer("advantages"):
        token_rewards = token_rewards_from_scores(batch.rewards.to(mask.device), mask)
        if reference is not None and algo.kl_in_reward:
            token_rewards, seq_kl = apply_kl_to_rewards(
                algo, token_rewards, batch.rollout_log_probs, batch.ref_log_probs, mask, kl_control.value
            )
            kl_control.update(seq_kl, len(batch))
            metrics["policy/kl_coef"] = kl_control.value
        batch.token_rewards = token_rewards
        batch.advantages, batch.returns = compute_advantages(
            algo, token_rewards, mask, batch.group_ids.to(mask.device), values=batch.values,
            baseline_rewards=batch.baseline_rewards,
        )
        metrics.update(filter_overlong(algo, batch))
    with timer("train"):
        metrics.update(mean_of(actor.update(batch, shuffle_gen), "policy"))
    if critic is not None:
        with timer("critic_train"):
            metrics.update(mean_of(critic.update(batch, shuffle_gen), "critic"))


@LOOPS.register("rl")
def train_rl(config: Config, resume: bool = False, write: Callable[[str], None] = print) -> dict:
    """Run (or resume) the recipe; returns the summary that is also written to ``summary.json``."""
    started = time.time()
    run_dir = Path(config.run_dir)
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if resume and checkpoint is None:
        write(f"no checkpoint in {run_dir}: starting the run from the beginning")
    prepare_run_dir(run_dir, resume, write)
    (run_dir / "config.yaml").write_text(dump_config(config))

    runtime = build_runtime(config)  # embedded (in-process) or ray: role constructors go through runtime.place
    basics = build_basics(config, runtime=runtime)
    algo, tcfg = config.algorithm, config.train
    torch.manual_seed(config.seed)
    state = load_run_state(checkpoint) if checkpoint else RunState()
    policy = load_policy(config, str(checkpoint / "policy") if checkpoint else basics.model_path, basics.device)
    rollout = build_rollout(config, policy, basics.tokenizer, runtime)
    monitor = build_monitor(config, rollout, resume_step=state.step if checkpoint else None)  # monitor/* metrics
    eval_tokens = config.eval.max_new_tokens or config.rollout.max_new_tokens

    def run_eval() -> dict[str, float]:
        return evaluate(rollout, basics.eval_reward, basics.task.eval, config.eval.batch_size, eval_tokens)

    if checkpoint is None and config.sft.steps:
        write(f"SFT: {config.sft.steps} steps of {config.sft.batch_size} examples")
        sft_losses = run_sft(
            policy, basics.tokenizer, basics.task.train, config.sft, config.seed,
            config.data.chat_template, config.data.max_prompt_tokens,
        )
        write(f"SFT done: loss {sft_losses[0]:.3f} -> {sft_losses[-1]:.3f}")
        rollout.update_weights(policy.state_dict(), version=0)
    reference_dir = run_dir / "reference"
    reference = None
    if algo.uses_reference:
        if checkpoint is None:
            policy.save_pretrained(reference_dir)
        reference = runtime.place(
            "reference", ReferenceRole,
            load_policy(config, str(reference_dir), basics.device), tcfg.micro_batch_size, config.rollout.temperature
        )
    actor = runtime.place("actor", ActorRole, policy, tcfg.optim, algo, tcfg.mini_batch_size, tcfg.micro_batch_size, config.rollout.temperature)
    critic = None
    if algo.use_critic:
        critic_lm = load_policy(config, config.model.critic_path, basics.device) if config.model.critic_path else frozen_copy(policy)
        critic = runtime.place(
            "critic", CriticRole,
            ValueModel(critic_lm.requires_grad_(True)).to(basics.device), tcfg.critic_optim, algo,
            tcfg.mini_batch_size, tcfg.micro_batch_size,
        )
    sample_gen = torch.Generator(device=basics.device).manual_seed(config.seed)
    shuffle_gen = torch.Generator().manual_seed(config.seed + 1)
    kl_control = kl_controller_from_config(algo)
    if checkpoint:
        load_trainer_states(checkpoint, actor, critic)
        state.restore_generators(sample_gen, shuffle_gen)
        if state.kl_coef is not None:
            kl_control.value = state.kl_coef
        rollout.update_weights(actor.state_dict(), version=state.step)
        write(f"resumed {run_dir} from {checkpoint.name} (step {state.step})")
    stream = PromptStream(basics.task.train, seed=config.seed, position=state.data_position)
    params = sampling_params(config)
    on_policy_reuse = not needs_old_log_probs(
        tcfg.prompts_per_step * params.n, tcfg.mini_batch_size, algo.ppo_epochs
    )
    logger = MetricsLogger(run_dir, config.logging.sinks, resume_step=state.step if checkpoint else None, write=write)
    prior_wall = state.wall_seconds

    def save(at_state: RunState) -> None:
        at_state.wall_seconds = prior_wall + time.time() - started
        at_state.kl_coef = kl_control.value
        save_checkpoint(run_dir, at_state, actor, critic, basics.tokenizer, config.checkpoint.keep_last)

    if checkpoint is None:
        state.last_eval = run_eval()
        state.initial_eval_accuracy = state.last_eval["eval/accuracy"]
        write(f"held-out accuracy before RL: {state.initial_eval_accuracy:.3f} on {len(basics.task.eval)} problems")
        logger.log(0, state.last_eval)
        state.capture(sample_gen, shuffle_gen, stream.position)
        save(state)

    def rollout_and_score(rows: list[dict], first_group: int, timer: StageTimer, metrics: dict) -> TrajectoryBatch:
        with timer("generation"):
            batch = rollout.generate(rows, params, sample_gen, first_group)
        with timer("reward"):
            scored = basics.reward.score_batch(batch, rollout.decode_prompts(batch), rollout.decode_responses(batch))
            scored.update(shape_overlong_rewards(algo, batch, params.max_new_tokens))
        for name, value in scored.items():  # with dynamic sampling: the first round's rewards
            metrics.setdefault(name, value)
        if needs_greedy_baseline(algo):
            with timer("greedy_baseline"):
                batch.baseline_rewards = greedy_baseline_rewards(
                    rollout, basics.reward, algo, rows, params, batch, first_group
                )
        return batch

    progress = _progress(config, state.step)
    for step in range(state.step + 1, tcfg.steps + 1):
        timer = StageTimer()
        step_start = time.perf_counter()
        metrics: dict[str, float] = {}
        before = RunState(**{**state.__dict__})
        try:
            batch = fill_batch(
                partial(rollout_and_score, timer=timer, metrics=metrics), stream, tcfg.prompts_per_step, algo,
                basics.tokenizer.pad_token_id, metrics,
            )
        except Exception:
            # Nothing of this step was trained yet: keep everything up to the previous step.
            save(before)
            write(f"step {step} failed; run saved at step {before.step} in {run_dir} (rlxf train --resume {run_dir})")
            raise
        batch = batch.to(basics.device)
        train_on_batch(batch, algo, actor, critic, reference, kl_control, shuffle_gen, on_policy_reuse, timer, metrics)
        with timer("weight_sync"):
            metrics.update(sync_weights(actor, rollout, step, config.runtime.weight_sync))
        lengths = batch.response_lengths.float()
        metrics.update({
            "response/length_mean": float(lengths.mean()),
            "response/length_max": float(lengths.max()),
            "response/truncated_fraction": float(batch.truncated.float().mean()),
            "samples": step * len(batch),
        })
        if config.eval.every and step % config.eval.every == 0 or step == tcfg.steps:
            with timer("eval"):
                state.last_eval = run_eval()
            metrics.update(state.last_eval)
        state.step = step
        state.capture(sample_gen, shuffle_gen, stream.position)
        if config.checkpoint.every and step % config.checkpoint.every == 0 or step == tcfg.steps:
            with timer("checkpoint"):
                save(state)
        with timer("monitor"):
            metrics.update(monitor.observe(batch, metrics))
        metrics.update(timer.seconds)
        metrics["time/step"] = time.perf_counter() - step_start
        logger.log(step, metrics)
        progress.update(1)
    progress.close()
    logger.close()
    total_wall = prior_wall + time.time() - started
    runtime.close()
    return write_summary(run_dir, state, total_wall, tcfg.steps)


def _progress(config: Config, done: int):
    from tqdm import tqdm

    return tqdm(
        total=config.train.steps, initial=done, desc="RL", unit="step", dynamic_ncols=True,
        disable=not config.logging.progress_bar, leave=False,
    )
