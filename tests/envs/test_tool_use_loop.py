"""Multi-turn through the RL loop, fast (the learning claim is tests/test_envs_slow.py): the tool_use
recipe, shrunk, after a short SFT on calculator demonstrations. Its step calls the calculator, trains
on the policy's own tokens only (the calculator's output is in the response but out of the loss), and
has a gradient."""

import json

import torch

from rlxf.checked_config import load_config
from rlxf.loops import rl
from tests.conftest import small_overrides

TOOL_USE = "recipes/tool_use.yaml"


def test_tool_use_recipe_step_trains_on_the_policys_tokens_only(tmp_path, tiny_model_dir, tokenizer, trained_batches):
    trained = trained_batches
    config = load_config(TOOL_USE, [
        *small_overrides(tmp_path, tiny_model_dir, steps=1), "data.task_args.tool_demo_fraction=1.0",
        "data.task_args.size=2000", "sft.steps=40", "sft.optim.lr=3e-3", "checkpoint.every=0",
    ])
    rl.train_rl(config, write=lambda _: None)
    (batch,) = trained
    turns = torch.tensor([m["turns"] for m in batch.metadata])
    own, shown = batch.loss_mask.sum(1), batch.response_mask.sum(1)
    tool_spoke = own < shown  # response tokens the policy did not write: the calculator's replies
    assert (turns > 1).any() and tool_spoke[turns > 1].all()  # calls that went on to another turn
    replies = tokenizer.batch_decode(batch.response_ids * (batch.response_mask - batch.loss_mask),
                                     skip_special_tokens=True)
    assert all(replies[i].startswith("=") for i in tool_spoke.nonzero().flatten().tolist())  # "=4788", "=error: ..."
    assert all(replies[i] == "" for i in (~tool_spoke).nonzero().flatten().tolist())
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[1]["reward/tool_calls"] > 0 and rows[1]["policy/grad_norm"] > 0
