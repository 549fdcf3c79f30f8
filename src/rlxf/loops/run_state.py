"""Everything a resumed RL run needs beyond model weights, and saving / loading a whole checkpoint."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from rlxf.models.tokenizer_files import save_tokenizer
from rlxf.train import checkpoint as ckpt


@dataclass
class RunState:
    step: int = 0  # RL steps completed
    data_position: int = 0  # prompts drawn from the training stream
    samples: int = 0  # trajectories trained (the ``samples`` metric; stale ones the async loop dropped not counted)
    sample_rng: str = ""  # rollout sampling generator state
    shuffle_rng: str = ""  # mini-batch shuffling generator state
    kl_coef: float | None = None  # the (adaptive) KL controller's current value
    initial_eval_accuracy: float | None = None
    initial_eval: dict = field(default_factory=dict)  # the whole first evaluation (offline loops)
    last_eval: dict = field(default_factory=dict)
    last_eval_step: int | None = None  # the step ``last_eval`` is of (a stopped run's may be older than its last step)
    best_eval_accuracy: float | None = None  # the highest held-out eval/accuracy so far (the earliest on ties)
    best_eval_step: int | None = None
    wall_seconds: float = 0.0  # wall time spent by this run up to the checkpoint, over all resumes
    # The checkpointed step's metrics (timings up to the save): logged again on resume if the run
    # died between writing the checkpoint and writing the step's metrics line.
    step_metrics: dict = field(default_factory=dict)

    def record_eval(self, step: int, metrics: dict) -> dict:
        """``metrics`` of the held-out evaluation at ``step`` become the last one, and the best if they are."""
        self.last_eval, self.last_eval_step = metrics, step
        accuracy = metrics.get("eval/accuracy")
        if accuracy is not None and (self.best_eval_accuracy is None or accuracy > self.best_eval_accuracy):
            self.best_eval_accuracy, self.best_eval_step = accuracy, step
        return metrics

    def checkpoint_due(self, checkpoint, last_step: int) -> bool:
        """A checkpoint at this step (``checkpoint``: the config's section): every ``checkpoint.every`` steps,
        at the last step, and at a new best held-out evaluation (``checkpoint.keep_best``)."""
        every = checkpoint.every
        new_best = checkpoint.keep_best and self.best_eval_step == self.step
        return bool(every and self.step % every == 0) or self.step == last_step or new_best

    def kept_steps(self, keep_best: bool) -> tuple[int, ...]:
        """Checkpoint steps that rotation (``keep_last``) must not delete: the best evaluation's."""
        return (self.best_eval_step,) if keep_best and self.best_eval_step is not None else ()

    def capture(self, sample_gen: torch.Generator, shuffle_gen: torch.Generator, data_position: int) -> None:
        self.sample_rng = ckpt.generator_state_to_json(sample_gen)
        self.shuffle_rng = ckpt.generator_state_to_json(shuffle_gen)
        self.data_position = data_position

    def restore_generators(self, sample_gen: torch.Generator, shuffle_gen: torch.Generator) -> None:
        sample_gen.set_state(ckpt.generator_state_from_json(self.sample_rng))
        shuffle_gen.set_state(ckpt.generator_state_from_json(self.shuffle_rng))


def save_checkpoint(run_dir: Path, state: RunState, actor, critic, tokenizer, keep_last: int,
                    keep_best: bool = False, expected_bytes: int = 0) -> Path:
    """``expected_bytes``: the checkpoint's estimated size, checked against the free space before writing."""
    def fill(folder: Path) -> None:
        actor.save_checkpoint(folder)
        save_tokenizer(tokenizer, folder / "policy")
        if critic is not None:
            critic.save_checkpoint(folder)
        (folder / "state.json").write_text(json.dumps(asdict(state), indent=1))

    return ckpt.write_checkpoint(run_dir, state.step, keep_last, fill, state.kept_steps(keep_best), expected_bytes)


def settle_finished_checkpoints(run_dir: Path, state: RunState, checkpoint) -> None:
    """A run that reached its last step keeps what a user needs (``checkpoint``: the config's section): the best
    checkpoint, unless it is the last, holds the policy weights only; with ``keep_optimizer: none`` every one
    does. The last one otherwise stays resumable (``--resume`` with more ``train.steps`` continues it)."""
    last = ckpt.latest_checkpoint(run_dir)
    for folder in ckpt.finished_checkpoints(run_dir):
        best = ckpt.checkpoint_step(folder) == state.best_eval_step
        if checkpoint.keep_optimizer == "none" or (best and folder != last):
            ckpt.drop_training_state(folder)


def load_run_state(checkpoint: Path) -> RunState:
    return RunState(**json.loads((checkpoint / "state.json").read_text()))


def load_trainer_states(checkpoint: Path, actor, critic) -> None:
    actor.load_checkpoint(checkpoint)
    if critic is not None:
        critic.load_checkpoint(checkpoint)
