"""``loop: reward_model`` — Bradley–Terry reward-model training on a preference dataset.

The reward model is the LM at ``model.path`` (after the ``sft`` warm-up stage when ``sft.steps > 0``)
with a scalar head (:mod:`rlxf.models.reward_model`). It is trained on the tokens the RL reward will
score: the prompt as the rollout decodes it (a chat template rendered, its special tokens dropped)
followed by the response, no end-of-sequence token, tokenized whole. Loss: ``-log sigmoid(score chosen -
score rejected)``, mean over pairs (``algos.bradley_terry_loss``), in micro-batches of
``preference.micro_batch_size`` pairs. ``eval/accuracy`` is the held-out pair accuracy (chosen scored
above rejected). The checkpoint's ``reward_model/`` folder is what ``reward.function: reward_model``
loads (``reward.kwargs.path``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from rlxf.algos import bradley_terry_loss
from rlxf.config import Config
from rlxf.data.preferences import normalise_pair
from rlxf.data.prompt_tokens import reward_prompt_texts
from rlxf.loops import LOOPS
from rlxf.loops.offline import Objective, run_offline, warm_start_policy
from rlxf.loops.setup import RunContext
from rlxf.models.reward_model import (
    encode_scored_texts,
    load_reward_model,
    reward_model_from_lm,
    sequence_rewards,
)


def pair_scores(model: torch.nn.Module, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen [B], rejected [B]) reward-model scores of a :func:`reward_model_batch` (2B rows)."""
    batch = batch.to(next(model.parameters()).device)
    scores = sequence_rewards(model, batch["input_ids"], batch["attention_mask"])
    half = len(scores) // 2
    return scores[:half], scores[half:]


def reward_model_batch(rows: list[dict], tokenizer, chat_template: bool, max_prompt_tokens: int):
    """The B chosen texts then the B rejected ones, as ``reward.function: reward_model`` will read them:
    the prompt encoded as the rollout encodes it and decoded as it decodes it for the reward (special
    tokens dropped), then the response; the score is read at the response's last token."""
    pairs = [normalise_pair(row) for row in rows]
    prompts = reward_prompt_texts([p for p, _, _ in pairs], tokenizer, chat_template, max_prompt_tokens)
    texts = [p + c for p, (_, c, _) in zip(prompts, pairs)] + [p + r for p, (_, _, r) in zip(prompts, pairs)]
    return encode_scored_texts(tokenizer, texts)


def reward_model_objective(config: Config, context: RunContext, checkpoint: Path | None, run_dir: Path, write,
                           stop=None) -> Objective:
    if checkpoint:
        model = load_reward_model(str(checkpoint / "reward_model"), context.device)
    else:
        model = reward_model_from_lm(warm_start_policy(config, context, write, stop))
    model.requires_grad_(True)
    micro, tokenizer = config.preference.micro_batch_size, context.tokenizer

    def batch_of(rows: list[dict]):
        return reward_model_batch(rows, tokenizer, config.data.chat_template, config.data.max_prompt_tokens)

    def loss_share(rows: list[dict], total_pairs: int):
        loss, accuracy = bradley_terry_loss(*pair_scores(model, batch_of(rows)))
        return loss * (len(rows) / total_pairs), {"pair_accuracy": accuracy}

    def step_inputs(rows: list[dict]):
        chunks = [rows[i: i + micro] for i in range(0, len(rows), micro)]
        return chunks, lambda chunk: loss_share(chunk, len(rows))

    @torch.no_grad()
    def evaluate() -> dict[str, float]:
        model.eval()
        rows = context.task.eval
        parts = [pair_scores(model, batch_of(rows[i: i + micro])) for i in range(0, len(rows), micro)]
        chosen, rejected = torch.cat([c for c, _ in parts]), torch.cat([r for _, r in parts])
        loss, accuracy = bradley_terry_loss(chosen, rejected)
        return {"eval/accuracy": accuracy, "eval/margin": float((chosen - rejected).mean()), "eval/loss": float(loss)}

    return Objective(
        model=model, optim=config.preference.optim, rows=context.task.train, steps=config.preference.steps,
        batch_size=config.preference.batch_size, step_inputs=step_inputs, evaluate=evaluate,
        model_name="reward_model",
    )


@LOOPS.register("reward_model")
def train_reward_model(config: Config, resume: bool = False, write: Callable[[str], None] = print) -> dict:
    return run_offline(config, reward_model_objective, resume, write)
