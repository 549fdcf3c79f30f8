"""The synchronous (on-policy) RL controller: a plain loop over the roles.

    prompts -> n rollouts each -> rewards -> reference / old-policy / critic / teacher forward passes
    -> advantages -> PPO epochs over mini-batches -> weight update into the rollout engine
    -> periodic held-out evaluation -> checkpoint

Every stage is timed (``time/<stage>`` metrics). The loop only calls role methods, so the roles can
live in this process or behind actor handles.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager
from functools import partial

from rlxf.algos import (
    TurnLayout,
    apply_kl_to_rewards,
    compute_advantages,
    distillation_reverse_kl,
    kl_per_token,
    token_rewards_from_scores,
)
from rlxf.algos.masked import masked_mean
from rlxf.batch import TrajectoryBatch
from rlxf.config import Config
from rlxf.data.prompts import PromptStream
from rlxf.loops import LOOPS
from rlxf.loops.batch_scorer import BatchScorer
from rlxf.loops.dynamic_sampling import fill_batch
from rlxf.loops.failed_steps import FailedSteps
from rlxf.loops.greedy_baseline import greedy_baseline_rewards, needs_greedy_baseline
from rlxf.loops.overlong import filter_overlong
from rlxf.loops.rl_session import RLSession, start_session
from rlxf.loops.run_state import RunState, settle_finished_checkpoints
from rlxf.loops.summary import write_summary
from rlxf.rewards.monitors import build_monitor
from rlxf.runtime.heap import release_freed_memory
from rlxf.runtime.weight_sync import sync_weights
from rlxf.tracking.reduce import reduce_metrics


class StageTimer:
    """``with timer("generation"): ...`` adds ``time/generation`` (seconds) to this step's metrics.

    With ``trim`` (``runtime.trim_memory``) each stage ends by giving the heap it freed back to the OS
    (runtime/heap.py): what one stage frees (KV caches, activations, weight buckets) would otherwise stay
    in the process's RSS through the next one. It changes no number; it costs ~1 ms a stage, and the
    next stage faults its pages back in (docs/benchmarks.md, LoRA vs full)."""

    def __init__(self, trim: bool = True) -> None:
        self.seconds: dict[str, float] = {}
        self.trim = trim

    @contextmanager
    def __call__(self, stage: str):
        start = time.perf_counter()
        yield
        if self.trim:
            release_freed_memory()
        self.seconds[f"time/{stage}"] = self.seconds.get(f"time/{stage}", 0.0) + time.perf_counter() - start


def mean_of(history: list[dict[str, float]], prefix: str) -> dict[str, float]:
    """The step's metrics from one dict per optimizer step: means, but *_max / *_min as extremes."""
    return {f"{prefix}/{k}": v for k, v in reduce_metrics(history).items()}


def train_on_batch(session: RLSession, batch: TrajectoryBatch, timer: StageTimer, metrics: dict[str, float]) -> None:
    """The trainer's half of a step on a scored batch (shared with loops/rl_async.py): reference /
    old-policy / critic / teacher passes, advantages, the policy (and critic) updates. Fills ``batch`` and
    ``metrics`` in place, with the batch's response lengths; ``samples`` counts the trajectories trained
    so far (kept across resumes)."""
    algo, actor, critic, reference = session.config.algorithm, session.actor, session.critic, session.reference
    kl_control, shuffle_gen = session.kl_control, session.shuffle_gen
    mask = batch.loss_mask
    if reference is not None:
        with timer("ref_log_probs"):
            batch.ref_log_probs = reference.compute_log_probs(batch)
        kl = masked_mean(kl_per_token(algo.kl_estimator, batch.rollout_log_probs, batch.ref_log_probs, algo.kl_cap), mask)
        metrics["policy/kl"] = float(kl)
    if not session.on_policy_reuse:
        with timer("old_log_probs"):
            batch.old_log_probs = actor.compute_log_probs(batch)
    if critic is not None:
        with timer("values"):
            batch.values = critic.compute_values(batch)
    # the policy's log-probs of its own tokens: the trainer's pass when it ran, else the sampler's
    student_log_probs = batch.rollout_log_probs if batch.old_log_probs is None else batch.old_log_probs
    if session.teacher is not None:
        with timer("teacher_log_probs"):
            batch.teacher_log_probs = session.teacher.compute_log_probs(batch)
        metrics["distill/reverse_kl"] = float(distillation_reverse_kl(student_log_probs, batch.teacher_log_probs, mask))
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
            baseline_rewards=batch.baseline_rewards, log_probs=student_log_probs,
            teacher_log_probs=batch.teacher_log_probs,
            turns=TurnLayout.from_rollout(batch.metadata, batch.response_ids, mask) if algo.uses_turns else None,
        )
        metrics.update(filter_overlong(algo, batch))
    with timer("train"):
        metrics.update(mean_of(actor.update(batch, shuffle_gen), "policy"))
    if critic is not None:
        with timer("critic_train"):
            metrics.update(mean_of(critic.update(batch, shuffle_gen), "critic"))
    session.state.samples += len(batch)
    lengths = batch.response_lengths.float()
    metrics.update({
        "samples": session.state.samples,
        "response/length_mean": float(lengths.mean()),
        "response/length_max": float(lengths.max()),
        "response/truncated_fraction": float(batch.truncated.float().mean()),
    })


@LOOPS.register("rl")
def train_rl(config: Config, resume: bool = False, write: Callable[[str], None] = print) -> dict:
    """Run (or resume) the recipe; returns the summary that is also written to ``summary.json``."""
    session = start_session(config, resume, write)
    try:
        run_steps(session)
    finally:  # also on an error: release the roles and the stop-signal handlers
        stopped = session.close()
    if not stopped:  # the run reached its last step
        settle_finished_checkpoints(session.run_dir, session.state, config.checkpoint)
    return write_summary(session.run_dir, session.state, session.wall_seconds, session.state.step, stopped)


def run_steps(session: RLSession) -> None:
    """The steps from the session's state to ``train.steps`` (or to a stop signal)."""
    config, write = session.config, session.write
    run_dir, context, state, rollout, actor = session.run_dir, session.context, session.state, session.rollout, session.actor
    algo, tcfg, params, sample_gen = config.algorithm, config.train, session.params, session.sample_gen
    monitor = build_monitor(config, rollout, resume_step=session.resume_step)  # monitor/* metrics
    stream = PromptStream(context.task.train, seed=config.seed, position=state.data_position)
    score = BatchScorer(context.reward, algo, params.max_new_tokens)
    failed_steps = FailedSteps(config.env.max_failed_steps)

    def rollout_and_score(rows: list[dict], first_group: int, timer: StageTimer, metrics: dict) -> TrajectoryBatch:
        with timer("generation"):
            batch = rollout.generate(rows, params, sample_gen, first_group)
        with timer("reward"):
            scored = score(rollout, batch)
        for name, value in scored.items():  # with dynamic sampling: the first round's rewards
            metrics.setdefault(name, value)
        if needs_greedy_baseline(algo):
            with timer("greedy_baseline"):
                batch.baseline_rewards = greedy_baseline_rewards(
                    rollout, context.reward, algo, rows, params, batch, first_group
                )
        return batch

    progress = session.progress_bar()
    for step in range(state.step + 1, tcfg.steps + 1):
        if session.stop.requested:  # came before this step (during the step-0 evaluation): that one is saved
            break
        timer = StageTimer(config.runtime.trim_memory)
        step_start = time.perf_counter()
        metrics: dict[str, float] = {}
        before = RunState(**{**state.__dict__})
        try:
            batch = fill_batch(
                partial(rollout_and_score, timer=timer, metrics=metrics), stream, tcfg.prompts_per_step, algo,
                context.tokenizer.pad_token_id, metrics,
            )
            failed_steps.observe(batch, step)  # every trajectory failed, step after step: stop
        except Exception:
            # Nothing of this step was trained yet: keep everything up to the previous step.
            session.save(before)
            write(f"step {step} failed; run saved at step {before.step} in {run_dir} (rlxf train --resume {run_dir})")
            raise
        batch = batch.to(context.device)
        train_on_batch(session, batch, timer, metrics)
        session.logger.log_samples(step, batch, context.tokenizer)  # logging.samples_every: samples.jsonl, trackers
        with timer("weight_sync"):
            metrics.update(sync_weights(actor, rollout, step, config.runtime.weight_sync))
        session.evaluate_if_due(step, timer, metrics)
        with timer("monitor"):
            metrics.update(monitor.observe(batch, metrics))
        state.step = step
        state.capture(sample_gen, session.shuffle_gen, stream.position)
        progress.update(1)
        if session.end_step(step_start, timer, metrics):  # a stop signal: this step is checkpointed
            break
    progress.close()
