"""A run's RL pieces, built (or restored from the last checkpoint) once: shared by the synchronous and
the asynchronous controllers, so both set up, resume and checkpoint a run the same way.

``start_session`` loads the policy, runs the SFT warm-up on a fresh run, places the reference /
teacher / actor / critic roles through the runtime, restores optimizer and RNG states on resume, and on a
fresh run evaluates the starting policy and writes the step-0 checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rlxf.algos import AdaptiveKLController, FixedKLController, kl_controller_from_config
from rlxf.config import Config, dump_config
from rlxf.eval.accuracy import evaluate_problems
from rlxf.loops.lora_policy import attach_lora, lora_start_path
from rlxf.loops.run_opening import OpenedRun, open_run
from rlxf.loops.run_state import RunState, load_run_state, load_trainer_states, save_checkpoint
from rlxf.loops.setup import (
    RunContext,
    build_rollout,
    build_run_context,
    frozen_copy,
    generation_budget,
    load_policy,
    sampling_params,
)
from rlxf.loops.sft import run_sft
from rlxf.loops.stop_signals import StopSignals
from rlxf.loops.teacher import place_teacher
from rlxf.models.saving import save_model
from rlxf.roles.actor import ActorRole
from rlxf.roles.critic import CriticRole
from rlxf.roles.reference import ReferenceRole
from rlxf.roles.rollout import RolloutRole
from rlxf.roles.teacher import TeacherRole
from rlxf.rollout.sampling import SamplingParams
from rlxf.runtime import Runtime, build_runtime
from rlxf.tracking.metrics import MetricsLogger
from rlxf.train.checkpoint import training_checkpoint_bytes
from rlxf.train.ppo_batches import needs_old_log_probs
from rlxf.train.value_model import ValueModel

NONFINITE_METRICS = ("policy/skipped_nonfinite", "critic/skipped_nonfinite")


@dataclass
class RLSession:
    """A run's pieces, typed by what the loop calls on them: with a process or Ray runtime the roles
    are proxies with the same methods (runtime/proxy.py)."""

    config: Config
    run_dir: Path
    checkpoint: Path | None  # resumed from; None on a fresh run
    runtime: Runtime
    context: RunContext
    state: RunState
    rollout: RolloutRole
    reference: ReferenceRole | None  # algorithm.kl_coef > 0
    teacher: TeacherRole | None  # an advantage estimator that reads a teacher (on_policy_distillation)
    actor: ActorRole
    critic: CriticRole | None  # algorithm.use_critic
    sample_gen: torch.Generator
    shuffle_gen: torch.Generator
    kl_control: FixedKLController | AdaptiveKLController
    params: SamplingParams
    on_policy_reuse: bool
    logger: MetricsLogger
    started: float
    prior_wall: float
    write: Callable[[str], None] = print
    stop: StopSignals = field(default_factory=StopSignals)
    checkpoint_bytes: int = 0  # a resumable checkpoint's estimated size: the free space is checked against it

    def save(self, at_state: RunState, metrics: dict[str, float] | None = None) -> None:
        """A checkpoint of ``at_state`` and the step's ``metrics`` so far."""
        at_state.wall_seconds = self.prior_wall + time.time() - self.started
        at_state.step_metrics = dict(metrics or {})
        at_state.kl_coef = self.kl_control.value
        save_checkpoint(self.run_dir, at_state, self.actor, self.critic, self.context.tokenizer,
                        self.config.checkpoint.keep_last, self.config.checkpoint.keep_best, self.checkpoint_bytes)

    def evaluate(self, rollout=None, step: int | None = None) -> dict[str, float]:
        """Held-out greedy evaluation with ``rollout`` (default: the session's rollout role); with
        ``step``, its per-problem results go to ``eval_problems.jsonl`` (and flips to the metrics)."""
        tokens = self.config.eval.max_new_tokens or self.config.rollout.max_new_tokens
        metrics, problems = evaluate_problems(self.rollout if rollout is None else rollout, self.context.eval_reward,
                                              self.context.task.eval, self.config.eval.batch_size, tokens)
        if step is not None:
            metrics.update(self.logger.log_eval_problems(step, problems))
        return metrics

    def evaluate_if_due(self, step: int, timer, metrics: dict[str, float], rollout=None) -> None:
        """Held-out evaluation every ``eval.every`` steps and at the last one, into ``metrics``."""
        every = self.config.eval.every
        if every and step % every == 0 or step == self.config.train.steps:
            with timer("eval"):
                self.state.record_eval(step, self.evaluate(rollout, step))
            metrics.update(self.state.last_eval)

    def end_step(self, step_start: float, timer, metrics: dict[str, float]) -> bool:
        """Checkpoint ``state`` when due (``RunState.checkpoint_due``; with the step's metrics so far), then
        log the step. True when a stop signal came (loops/stop_signals.py): the step is checkpointed and the loop should end."""
        step, stopping = self.state.step, self.stop.requested is not None
        if self.state.checkpoint_due(self.config.checkpoint, self.config.train.steps) or stopping:
            with timer("checkpoint"):
                self.save(self.state, {**metrics, **timer.seconds})
        metrics.update(timer.seconds)
        metrics["time/step"] = time.perf_counter() - step_start
        self.logger.log(step, metrics)
        for name in NONFINITE_METRICS:
            if metrics.get(name):  # the engine skipped the update; it stops the run after a few in a row
                self.write(f"step {step}: {metrics[name]:.0%} of the optimizer steps had a non-finite loss or "
                           f"gradient and were skipped ({name})")
        return stopping  # rlxf train says so, in one line (cli.py)

    def close(self) -> dict:
        """Flush the metric sinks, release the roles and the signal handlers; the run's summary."""
        self.logger.close()
        self.runtime.close()
        self.stop.restore()
        stopped = {"stopped_by": self.stop.requested.name} if self.stop.requested else {}
        return stopped

    def progress_bar(self):
        from tqdm import tqdm

        return tqdm(
            total=self.config.train.steps, initial=self.state.step, desc="RL", unit="step", dynamic_ncols=True,
            disable=not self.config.logging.progress_bar, leave=False,
        )

    @property
    def wall_seconds(self) -> float:
        return self.prior_wall + time.time() - self.started

    @property
    def resume_step(self) -> int | None:
        return self.state.step if self.checkpoint else None


def start_session(config: Config, resume: bool, write: Callable[[str], None]) -> RLSession:
    """The session, its step-0 checkpoint written (fresh run) or restored (resume). Anything that fails,
    or a stop signal, before that checkpoint leaves the run folder as it was found (loops/run_dir.py)."""
    started = time.time()
    opened = open_run(config, resume, write)
    try:
        session = _start_session(config, opened, started, write)
    except BaseException:
        opened.folder.undo()
        opened.stop.restore()
        raise
    opened.folder.keep()
    return session


def _start_session(config: Config, opened: OpenedRun, started: float, write: Callable[[str], None]) -> RLSession:
    run_dir, checkpoint = opened.run_dir, opened.checkpoint
    (run_dir / "config.yaml").write_text(dump_config(config))

    runtime = build_runtime(config)  # embedded (in-process) or ray: role constructors go through runtime.place
    context = build_run_context(config, runtime=runtime)
    torch.manual_seed(config.seed)
    state = load_run_state(checkpoint) if checkpoint else RunState()
    start = lora_start_path(config, run_dir, checkpoint) or (str(checkpoint / "policy") if checkpoint else context.model_path)
    policy = load_policy(config, start, context.device)
    rollout = build_rollout(config, policy, context.tokenizer, runtime)
    if checkpoint is None and config.sft.steps:
        warm_up_with_sft(config, policy, context, rollout, write, opened.stop)
    if config.model.lora is not None:  # adapters on the policy; the reference is the adapter switched off
        policy = attach_lora(config, policy, run_dir, checkpoint)
    # the critic is a value head on a copy of the policy: about as big, with its own optimizer state
    checkpoint_bytes = training_checkpoint_bytes(policy) * (2 if config.algorithm.use_critic else 1)
    reference = place_reference(config, runtime, policy, context, run_dir / "reference", fresh=checkpoint is None)
    teacher = place_teacher(config, runtime, context)  # read from model.teacher_path again on resume: frozen
    actor, critic = place_trainers(config, runtime, policy, context)
    params = sampling_params(config)
    tcfg = config.train
    session = RLSession(
        config=config, run_dir=run_dir, checkpoint=checkpoint, runtime=runtime, context=context, state=state,
        rollout=rollout, reference=reference, teacher=teacher, actor=actor, critic=critic,
        sample_gen=torch.Generator(device=context.device).manual_seed(config.seed),
        shuffle_gen=torch.Generator().manual_seed(config.seed + 1), kl_control=kl_controller_from_config(config.algorithm),
        params=params,
        # exact on-policy: the old log-probs come from the exact pass, never from the gradient pass's forward
        on_policy_reuse=not config.rollout.exact_on_policy and not needs_old_log_probs(
            tcfg.prompts_per_step * params.n, tcfg.mini_batch_size, config.algorithm.ppo_epochs),
        logger=MetricsLogger.for_run(config, resume_step=state.step if checkpoint else None, write=write),
        started=started, prior_wall=state.wall_seconds, write=write, stop=opened.stop,
        checkpoint_bytes=checkpoint_bytes,
    )
    if checkpoint:
        resume_from(session, checkpoint)
    else:
        evaluate_and_save_step_0(session)
    return session


def warm_up_with_sft(config: Config, policy: torch.nn.Module, context: RunContext, rollout, write,
                     stop: StopSignals | None = None) -> None:
    """The ``sft`` stage of a fresh run, then its weights into the rollout engine (a stop signal ends it
    after its current step, before the run has a checkpoint: loops/stop_signals.py)."""
    rows = context.task.train
    if config.sft.targets == "teacher":
        from rlxf.loops.teacher_targets import teacher_sft_rows

        rows = teacher_sft_rows(config, context, write)
    write(f"SFT: {config.sft.steps} steps of {config.sft.batch_size} examples")
    every, started = max(1, config.sft.steps // 10), time.perf_counter()

    def on_step(step: int, metrics: dict) -> None:
        if (step + 1) % every == 0 or step + 1 == config.sft.steps:  # a real model's warm-up takes minutes
            write(f"SFT step {step + 1}/{config.sft.steps}: loss {metrics['loss']:.3f} "
                  f"({(time.perf_counter() - started) / (step + 1):.1f} s/step)")
        if stop is not None:
            stop.check_warm_up("SFT warm-up", step + 1, config.sft.steps)

    losses = run_sft(policy, context.tokenizer, rows, config.sft, config.seed,
                     config.data.chat_template, config.data.max_prompt_tokens, on_step=on_step)
    write(f"SFT done: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    rollout.update_weights(policy.state_dict(), version=0)


def place_reference(config: Config, runtime: Runtime, policy: torch.nn.Module, context: RunContext, folder: Path,
                    fresh: bool) -> ReferenceRole | None:
    """The frozen reference (only with ``algorithm.kl_coef > 0``): the starting policy, saved once in
    ``folder``; with LoRA the policy itself with its adapter switched off."""
    if not config.algorithm.uses_reference:
        return None
    if config.model.lora is not None:  # the policy itself, its adapter switched off: no copy
        return runtime.place("reference", ReferenceRole, policy, config.train.micro_batch_size, config.rollout.temperature,
                             config.train.logits_chunk_tokens)
    if fresh:
        save_model(policy, folder)
    return runtime.place("reference", ReferenceRole, load_policy(config, str(folder), context.device),
                         config.train.micro_batch_size, config.rollout.temperature, config.train.logits_chunk_tokens)


def place_trainers(config: Config, runtime: Runtime, policy: torch.nn.Module,
                   context: RunContext) -> tuple[ActorRole, CriticRole | None]:
    """The actor, and the critic when the algorithm has one (with train.world_size > 1 the Ray runtime
    places N ranks behind one group proxy: runtime/group_proxy.py)."""
    algo, tcfg = config.algorithm, config.train
    schedule = {"backend": tcfg.backend, "engine_options": tcfg.engine_options(),
                "micro_batch_tokens": tcfg.micro_batch_tokens, "max_response_len": generation_budget(config)}
    actor = runtime.place("actor", ActorRole, policy, tcfg.optim, algo, tcfg.mini_batch_size, tcfg.micro_batch_size,
                          config.rollout.temperature, logits_chunk_tokens=tcfg.logits_chunk_tokens,
                          exact_log_probs=config.rollout.exact_on_policy, **schedule)
    if not algo.use_critic:
        return actor, None
    critic_lm = load_policy(config, config.model.critic_path, context.device) if config.model.critic_path else frozen_copy(policy)
    critic = runtime.place("critic", CriticRole, ValueModel(critic_lm.requires_grad_(True)).to(context.device),
                           tcfg.critic_optim, algo, tcfg.mini_batch_size, tcfg.micro_batch_size, **schedule)
    return actor, critic


def resume_from(session: RLSession, checkpoint: Path) -> None:
    """Optimizer, generator and KL-controller states from ``checkpoint``; the engine gets the actor's weights."""
    state = session.state
    load_trainer_states(checkpoint, session.actor, session.critic)
    state.restore_generators(session.sample_gen, session.shuffle_gen)
    if state.kl_coef is not None:
        session.kl_control.value = state.kl_coef
    session.rollout.update_weights(session.actor.state_dict(), version=state.step)
    session.write(f"resumed {session.run_dir} from {checkpoint.name} (step {state.step})")
    session.logger.restore(state.step, state.step_metrics)


def evaluate_and_save_step_0(session: RLSession) -> None:
    """A fresh run's starting point: the held-out evaluation of the starting policy and checkpoint 0."""
    state = session.state
    state.record_eval(0, session.evaluate(step=0))
    state.initial_eval_accuracy = state.last_eval["eval/accuracy"]
    session.write(f"held-out accuracy before RL: {state.initial_eval_accuracy:.3f} on "
                  f"{len(session.context.task.eval)} problems")
    session.logger.log(0, state.last_eval)
    state.capture(session.sample_gen, session.shuffle_gen, state.data_position)
    session.save(state)
