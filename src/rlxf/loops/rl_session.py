"""A run's RL pieces, built (or restored from the last checkpoint) once: shared by the synchronous and
the asynchronous controllers, so both set up, resume and checkpoint a run the same way.

``start_session`` loads the policy, runs the SFT warm-up on a fresh run, places the reference /
actor / critic roles through the runtime, restores optimizer and RNG states on resume, and on a
fresh run evaluates the starting policy and writes the step-0 checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from rlxf.algos import kl_controller_from_config
from rlxf.config import Config, dump_config
from rlxf.eval.accuracy import evaluate_problems
from rlxf.loops.lora_policy import attach_lora, lora_start_path
from rlxf.loops.run_dir import prepare_run_dir
from rlxf.loops.run_state import RunState, load_run_state, load_trainer_states, save_checkpoint
from rlxf.loops.setup import Basics, build_basics, build_rollout, frozen_copy, load_policy, sampling_params
from rlxf.loops.sft import run_sft
from rlxf.models.value_head import ValueModel
from rlxf.roles.actor import ActorRole
from rlxf.roles.critic import CriticRole
from rlxf.roles.reference import ReferenceRole
from rlxf.rollout.sampling import SamplingParams
from rlxf.runtime import build_runtime
from rlxf.tracking.metrics import MetricsLogger
from rlxf.train.checkpoint import latest_checkpoint
from rlxf.train.ppo_batches import needs_old_log_probs


@dataclass
class RLSession:
    config: Config
    run_dir: Path
    checkpoint: Path | None
    runtime: object
    basics: Basics
    state: RunState
    rollout: object
    reference: object | None
    actor: object
    critic: object | None
    sample_gen: torch.Generator
    shuffle_gen: torch.Generator
    kl_control: object
    params: SamplingParams
    on_policy_reuse: bool
    logger: MetricsLogger
    started: float
    prior_wall: float

    def save(self, at_state: RunState, metrics: dict[str, float] | None = None) -> None:
        """A checkpoint of ``at_state`` and the step's ``metrics`` so far."""
        at_state.wall_seconds = self.prior_wall + time.time() - self.started
        at_state.step_metrics = dict(metrics or {})
        at_state.kl_coef = self.kl_control.value
        save_checkpoint(self.run_dir, at_state, self.actor, self.critic, self.basics.tokenizer,
                        self.config.checkpoint.keep_last)

    def evaluate(self, rollout=None, step: int | None = None) -> dict[str, float]:
        """Held-out greedy evaluation with ``rollout`` (default: the session's rollout role); with
        ``step``, its per-problem results go to ``eval_problems.jsonl`` (and flips to the metrics)."""
        tokens = self.config.eval.max_new_tokens or self.config.rollout.max_new_tokens
        metrics, problems = evaluate_problems(self.rollout if rollout is None else rollout, self.basics.eval_reward,
                                              self.basics.task.eval, self.config.eval.batch_size, tokens)
        if step is not None:
            metrics.update(self.logger.log_eval_problems(step, problems))
        return metrics

    def evaluate_if_due(self, step: int, timer, metrics: dict[str, float], rollout=None) -> None:
        """Held-out evaluation every ``eval.every`` steps and at the last one, into ``metrics``."""
        every = self.config.eval.every
        if every and step % every == 0 or step == self.config.train.steps:
            with timer("eval"):
                self.state.last_eval = self.evaluate(rollout, step)
            metrics.update(self.state.last_eval)

    def end_step(self, step_start: float, timer, metrics: dict[str, float]) -> None:
        """Checkpoint ``state`` when due (with the step's metrics so far), then log the step."""
        step, every = self.state.step, self.config.checkpoint.every
        if every and step % every == 0 or step == self.config.train.steps:
            with timer("checkpoint"):
                self.save(self.state, {**metrics, **timer.seconds})
        metrics.update(timer.seconds)
        metrics["time/step"] = time.perf_counter() - step_start
        self.logger.log(step, metrics)

    @property
    def wall_seconds(self) -> float:
        return self.prior_wall + time.time() - self.started

    @property
    def resume_step(self) -> int | None:
        return self.state.step if self.checkpoint else None


def start_session(config: Config, resume: bool, write: Callable[[str], None]) -> RLSession:
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
    start = lora_start_path(config, run_dir, checkpoint) or (str(checkpoint / "policy") if checkpoint else basics.model_path)
    policy = load_policy(config, start, basics.device)
    rollout = build_rollout(config, policy, basics.tokenizer, runtime)
    if checkpoint is None and config.sft.steps:
        write(f"SFT: {config.sft.steps} steps of {config.sft.batch_size} examples")
        sft_losses = run_sft(
            policy, basics.tokenizer, basics.task.train, config.sft, config.seed,
            config.data.chat_template, config.data.max_prompt_tokens,
        )
        write(f"SFT done: loss {sft_losses[0]:.3f} -> {sft_losses[-1]:.3f}")
        rollout.update_weights(policy.state_dict(), version=0)
    if config.model.lora is not None:  # adapters on the policy; the reference is the adapter switched off
        policy = attach_lora(config, policy, run_dir, checkpoint)
    reference = None
    if algo.uses_reference and config.model.lora is not None:
        reference = runtime.place("reference", ReferenceRole, policy, tcfg.micro_batch_size, config.rollout.temperature)
    elif algo.uses_reference:
        reference_dir = run_dir / "reference"
        if checkpoint is None:
            policy.save_pretrained(reference_dir)
        reference = runtime.place(
            "reference", ReferenceRole,
            load_policy(config, str(reference_dir), basics.device), tcfg.micro_batch_size, config.rollout.temperature
        )
    # With train.world_size > 1 the Ray runtime places N ranks behind one group proxy (runtime/group_proxy.py).
    actor = runtime.place("actor", ActorRole, policy, tcfg.optim, algo, tcfg.mini_batch_size, tcfg.micro_batch_size,
                          config.rollout.temperature, backend=tcfg.backend, engine_options=tcfg.engine_options(),
                          micro_batch_tokens=tcfg.micro_batch_tokens)
    critic = None
    if algo.use_critic:
        critic_lm = load_policy(config, config.model.critic_path, basics.device) if config.model.critic_path else frozen_copy(policy)
        critic = runtime.place(
            "critic", CriticRole,
            ValueModel(critic_lm.requires_grad_(True)).to(basics.device), tcfg.critic_optim, algo,
            tcfg.mini_batch_size, tcfg.micro_batch_size, backend=tcfg.backend,
            engine_options=tcfg.engine_options(), micro_batch_tokens=tcfg.micro_batch_tokens,
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
    params = sampling_params(config)
    session = RLSession(
        config=config, run_dir=run_dir, checkpoint=checkpoint, runtime=runtime, basics=basics, state=state,
        rollout=rollout, reference=reference, actor=actor, critic=critic, sample_gen=sample_gen,
        shuffle_gen=shuffle_gen, kl_control=kl_control, params=params,
        on_policy_reuse=not needs_old_log_probs(tcfg.prompts_per_step * params.n, tcfg.mini_batch_size, algo.ppo_epochs),
        logger=MetricsLogger.for_run(config, resume_step=state.step if checkpoint else None, write=write),
        started=started, prior_wall=state.wall_seconds,
    )
    if checkpoint:
        session.logger.restore(state.step, state.step_metrics)
    if checkpoint is None:
        state.last_eval = session.evaluate(step=0)
        state.initial_eval_accuracy = state.last_eval["eval/accuracy"]
        write(f"held-out accuracy before RL: {state.initial_eval_accuracy:.3f} on {len(basics.task.eval)} problems")
        session.logger.log(0, state.last_eval)
        state.capture(sample_gen, shuffle_gen, state.data_position)
        session.save(state)
    return session
