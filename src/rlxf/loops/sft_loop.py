"""``loop: sft`` — supervised fine-tuning as a run of its own (prompt tokens masked from the loss).

``sft.steps`` optimizer steps of ``sft.batch_size`` rows (the batch and loss of :mod:`rlxf.loops.sft`);
the held-out evaluation is the task accuracy of greedy answers. The checkpoint's ``policy/`` loads
with ``AutoModelForCausalLM`` and can start an RL or DPO run (``model.path``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rlxf.config import Config
from rlxf.data.sft_examples import sft_batch
from rlxf.loops import LOOPS
from rlxf.loops.offline import Objective, run_offline, task_evaluator
from rlxf.loops.setup import RunContext, load_policy
from rlxf.loops.sft import sft_step_inputs


def sft_objective(config: Config, context: RunContext, checkpoint: Path | None, run_dir: Path, write,
                  stop=None) -> Objective:
    policy = load_policy(config, str(checkpoint / "policy") if checkpoint else context.model_path, context.device)

    def step_inputs(rows: list[dict]):
        batch = sft_batch(rows, context.tokenizer, config.data.chat_template, config.data.max_prompt_tokens)
        return sft_step_inputs(policy, batch, config.sft.micro_batch_size)

    return Objective(
        model=policy, optim=config.sft.optim, rows=context.task.train, steps=config.sft.steps,
        batch_size=config.sft.batch_size, step_inputs=step_inputs,
        evaluate=task_evaluator(config, context, policy),
    )


@LOOPS.register("sft")
def train_sft(config: Config, resume: bool = False, write: Callable[[str], None] = print) -> dict:
    return run_offline(config, sft_objective, resume, write)
