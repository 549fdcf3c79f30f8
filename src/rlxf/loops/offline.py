"""The controller shared by the offline loops (sft, dpo, reward_model): no rollout stage.

    rows -> batch -> micro-batches -> one optimizer step -> periodic held-out evaluation -> checkpoint

Each loop says what it trains with an :class:`Objective`; this file owns the run directory
(``config.yaml``, ``metrics.jsonl``, ``checkpoints/step_N/``, ``summary.json`` — the same files as
the RL loop), the seeded resumable row stream, checkpoints and resume.

A checkpoint holds ``<objective.model_name>/`` (the model, loadable on its own, and the tokenizer),
``trainer.optimizer.*`` and ``state.json``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from rlxf.config import Config, OptimConfig, dump_config
from rlxf.data.prompts import PromptStream
from rlxf.loops.run_opening import open_run
from rlxf.loops.run_state import RunState, load_run_state, settle_finished_checkpoints
from rlxf.loops.setup import RunContext, build_rollout, build_run_context, load_policy
from rlxf.loops.sft import run_sft
from rlxf.loops.stop_signals import StopSignals
from rlxf.loops.summary import write_summary
from rlxf.models.saving import save_model
from rlxf.models.tokenizer_files import save_tokenizer
from rlxf.tracking.metrics import MetricsLogger
from rlxf.train import checkpoint as ckpt
from rlxf.train.engine import LossFn, TrainEngine


@dataclass
class Objective:
    """What an offline loop trains, on which rows, and how it is evaluated."""

    model: torch.nn.Module  # the module the TrainEngine optimises
    optim: OptimConfig
    rows: list[dict]  # training rows, drawn in seeded passes (PromptStream)
    steps: int
    batch_size: int  # rows per optimizer step
    step_inputs: Callable[[list[dict]], tuple[Iterable, LossFn]]  # rows -> (micro-batches, loss share of one)
    evaluate: Callable[[], dict[str, float]]  # held-out metrics, ``eval/accuracy`` first among them
    model_name: str = "policy"
    step_metrics: Callable[[], dict[str, float]] | None = None  # logged after each step (e.g. online counts)


# (config, context, checkpoint to resume from or None, run dir, write, stop signals) -> Objective
ObjectiveBuilder = Callable[[Config, RunContext, "Path | None", Path, Callable[[str], None], StopSignals], Objective]


def warm_start_policy(config: Config, context: RunContext, write: Callable[[str], None],
                      stop: StopSignals | None = None) -> torch.nn.Module:
    """The policy at ``model.path``, after the ``sft`` warm-up stage when ``sft.steps > 0`` (a stop signal
    ends the warm-up after its current step: :meth:`StopSignals.check_warm_up`)."""
    policy = load_policy(config, context.model_path, context.device)
    if config.sft.steps:
        write(f"SFT: {config.sft.steps} steps of {config.sft.batch_size} examples")
        losses = run_sft(
            policy, context.tokenizer, context.task.train, config.sft, config.seed,
            config.data.chat_template, config.data.max_prompt_tokens,
            on_step=None if stop is None else lambda step, _: stop.check_warm_up("SFT warm-up", step + 1, config.sft.steps),
        )
        write(f"SFT done: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    return policy


def task_evaluator(config: Config, context: RunContext, policy: torch.nn.Module) -> Callable[[], dict[str, float]]:
    """Greedy held-out answers of ``policy`` scored by the eval reward (``eval/accuracy`` etc.)."""
    from rlxf.eval.accuracy import evaluate

    rollout = build_rollout(config, policy, context.tokenizer)
    tokens = config.eval.max_new_tokens or config.rollout.max_new_tokens
    version = [0]

    def run() -> dict[str, float]:
        version[0] += 1
        rollout.update_weights(policy.state_dict(), version=version[0])
        return evaluate(rollout, context.eval_reward, context.task.eval, config.eval.batch_size, tokens)

    return run


def save_offline_checkpoint(run_dir: Path, state: RunState, objective: Objective, engine: TrainEngine,
                            tokenizer, keep_last: int, keep_best: bool = False) -> Path:
    def fill(folder: Path) -> None:
        save_model(objective.model, folder / objective.model_name)  # (no DeepSpeed import: models/saving.py)
        save_tokenizer(tokenizer, folder / objective.model_name)
        ckpt.save_optimizer(engine.optimizer, engine.scheduler, folder, "trainer")
        (folder / "state.json").write_text(json.dumps(asdict(state), indent=1))

    return ckpt.write_checkpoint(run_dir, state.step, keep_last, fill, state.kept_steps(keep_best),
                                 ckpt.training_checkpoint_bytes(objective.model))


def run_offline(config: Config, build: ObjectiveBuilder, resume: bool, write: Callable[[str], None]) -> dict:
    """Run (or resume) an offline loop; returns the summary also written to ``summary.json``.

    A stop signal (loops/stop_signals.py) ends the run after the step in progress, checkpointed; one before
    the first checkpoint (e.g. during the SFT warm-up) leaves the run folder as it was found."""
    started = time.time()
    opened = open_run(config, resume, write)
    run_dir, checkpoint, stop = opened.run_dir, opened.checkpoint, opened.stop
    try:
        (run_dir / "config.yaml").write_text(dump_config(config))
        context = build_run_context(config)
        torch.manual_seed(config.seed)
        state = load_run_state(checkpoint) if checkpoint else RunState()
        objective = build(config, context, checkpoint, run_dir, write, stop)
        engine = TrainEngine(objective.model, objective.optim)
        if checkpoint:
            ckpt.load_optimizer(engine.optimizer, engine.scheduler, checkpoint, "trainer")
            write(f"resumed {run_dir} from {checkpoint.name} (step {state.step})")
        stream = PromptStream(objective.rows, seed=config.seed, position=state.data_position)
        logger = MetricsLogger.for_run(config, resume_step=state.step if checkpoint else None, write=write)
        prior_wall = state.wall_seconds

        def save() -> None:
            state.wall_seconds = prior_wall + time.time() - started
            save_offline_checkpoint(run_dir, state, objective, engine, context.tokenizer, config.checkpoint.keep_last,
                                    config.checkpoint.keep_best)

        if checkpoint is None:
            state.record_eval(0, objective.evaluate())
            state.initial_eval = dict(state.last_eval)
            state.initial_eval_accuracy = state.last_eval["eval/accuracy"]
            write(f"held-out before training: {_brief(state.last_eval)}")
            logger.log(0, state.last_eval)
            save()
        opened.folder.keep()  # a checkpoint exists: the folder is the run's now
        for step in range(state.step + 1, objective.steps + 1):
            if stop.requested:  # came during the step-0 evaluation or between steps: the last one is saved
                break
            step_start = time.perf_counter()
            micro_batches, loss_of = objective.step_inputs(stream.take(objective.batch_size))
            metrics = {f"train/{k}": v for k, v in engine.optimizer_step(micro_batches, loss_of).items()}
            if objective.step_metrics is not None:
                metrics.update({f"train/{k}": v for k, v in objective.step_metrics().items()})
            if config.eval.every and step % config.eval.every == 0 or step == objective.steps:
                metrics.update(state.record_eval(step, objective.evaluate()))
            state.step, state.data_position = step, stream.position
            if state.checkpoint_due(config.checkpoint, objective.steps) or stop.requested:
                save()
            metrics["time/step"] = time.perf_counter() - step_start
            logger.log(step, metrics)
        logger.close()
    except BaseException:
        opened.folder.undo()  # before the first checkpoint: the folder as it was found
        raise
    finally:
        stop.restore()
    write(f"held-out after training: {_brief(state.last_eval)}")
    final = state.last_eval_step == state.step  # else a stop came between evaluations (loops/summary.py)
    extra = {"initial_eval": state.initial_eval, "final_eval" if final else "last_eval": state.last_eval}
    if stop.requested:
        extra["stopped_by"] = stop.requested.name
    else:  # a finished run: its best checkpoint keeps the weights only (a stopped one resumes)
        settle_finished_checkpoints(run_dir, state, config.checkpoint)
    return write_summary(run_dir, state, prior_wall + time.time() - started, state.step, extra)


def _brief(metrics: dict[str, float]) -> str:
    return ", ".join(f"{k.removeprefix('eval/')} {v:.3f}" for k, v in metrics.items())
