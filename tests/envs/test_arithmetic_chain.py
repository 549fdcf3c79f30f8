"""The arithmetic_chain task and environment (credit per turn): rows, demonstrations, per-step rewards, a
wrong step ending the episode; and through the RL loop, each turn's tokens get their turn's advantage."""

from __future__ import annotations

import pytest
import torch

from rlxf.checked_config import load_config
from rlxf.data.arithmetic_chain import arithmetic_chain_task, chain_row
from rlxf.envs.arithmetic_chain import ArithmeticChainEnv
from rlxf.envs.base import env_factory
from rlxf.loops import rl
from tests.conftest import small_overrides


def test_chain_row_and_the_sloppy_demonstration_that_ends_at_its_mistake():
    row = chain_row(47, [8, 6, 1], [False, False, False], "</s>")
    assert row["prompt"] == "47+8=" and row["answer"] == "55"
    assert row["chain"] == [{"expr": "47+8=", "answer": "55"}, {"expr": "55+6=", "answer": "61"},
                            {"expr": "61+1=", "answer": "62"}]
    assert row["sft_target"] == "55</s>\n55+6=61</s>\n61+1=62"
    sloppy = chain_row(47, [8, 6, 1], [False, True, False], "</s>")
    assert sloppy["chain"] == row["chain"] and sloppy["sft_target"] == "55</s>\n55+6=51"


def test_task_splits_are_seeded_and_the_teacher_is_sloppy_only_on_training_carries():
    splits = arithmetic_chain_task(seed=3, eval_size=20, size=500, sloppy_teacher=1.0)
    again = arithmetic_chain_task(seed=3, eval_size=20, size=500, sloppy_teacher=1.0)
    assert splits.train == again.train and len(splits.eval) == 20
    assert all(r["sft_target"].endswith(r["chain"][-1]["answer"]) for r in splits.eval)  # eval: no mistakes
    first = splits.train[0]["chain"][0]
    a, d = (int(x) for x in first["expr"].rstrip("=").split("+"))
    carries = a % 10 + d >= 10
    assert splits.train[0]["sft_target"].startswith(str((a // 10) * 10 + (a + d) % 10) if carries else first["answer"])
    with pytest.raises(ValueError, match="steps=0: must be 1 or more"):
        arithmetic_chain_task(seed=0, eval_size=2, steps=0)


def test_environment_rewards_each_correct_step_and_ends_at_a_wrong_one():
    row = chain_row(47, [8, 6, 1], [False] * 3, "</s>")
    env = env_factory("arithmetic_chain", {"step_reward": 0.5})()
    assert env.reset(row) is None
    assert env.step("55") == ("\n55+6=", 0.5, False, {})
    assert env.step("51") == (None, 0.0, True, {"components": {"correct": 0.0, "steps_correct": 1 / 3}})
    env.reset(row)
    assert [env.step(a)[1:3] for a in ("55", "61", "62")] == [(0.5, False), (0.5, False), (0.5, True)]
    assert env.step.__self__.position == 3
    with pytest.raises(ValueError, match="no `chain`"):
        env.reset({"prompt": "1+1="})


def test_without_end_at_mistake_every_step_is_attempted_and_the_demonstration_goes_on():
    sloppy = chain_row(47, [8, 6, 1], [False, True, False], "</s>", end_at_mistake=False)
    assert sloppy["sft_target"] == "55</s>\n55+6=51</s>\n61+1=62"  # the next step from the true value, 61
    env = ArithmeticChainEnv(step_reward=0.5, end_at_mistake=False)
    env.reset(sloppy)
    assert env.step("55") == ("\n55+6=", 0.5, False, {})
    assert env.step("51") == ("\n61+1=", 0.0, False, {})
    assert env.step("62") == (None, 0.5, True, {"components": {"correct": 0.0, "steps_correct": 2 / 3}})
    env.reset(sloppy)
    assert [env.step(a)[1:3] for a in ("55", "61", "62")] == [(0.5, False), (0.5, False), (0.5, True)]
    splits = arithmetic_chain_task(seed=3, eval_size=20, size=500, steps=4, sloppy_teacher=1.0, end_at_mistake=False)
    assert all(r["sft_target"].count("</s>") == 3 for r in splits.train)  # all four steps demonstrated


class ParityChain(ArithmeticChainEnv):
    """A step is "right" when the sampled action has an even length: an untrained model's episodes then
    end at different turns within a group."""

    def step(self, action: str):
        return super().step(self.chain[self.position]["answer"] if len(action) % 2 == 0 else "-1")


def test_loop_gives_each_turn_its_own_advantage(tmp_path, tiny_model_dir, trained_batches):
    config = load_config("recipes/arithmetic_chain.yaml", [
        *small_overrides(tmp_path, tiny_model_dir, steps=1), "data.task_args.size=500", "checkpoint.every=0",
        "algorithm.norm_adv_by_std=false", f"env.name={__name__}:ParityChain", "train.prompts_per_step=8",
    ])
    assert config.algorithm.advantage_estimator == "turn_grpo" and config.algorithm.turn_gamma == 0.0
    rl.train_rl(config, write=lambda _: None)
    (batch,) = trained_batches
    assert (batch.advantages[batch.loss_mask == 0] == 0).all()
    groups, mixed = batch.group_ids.tolist(), 0
    for i, row in enumerate(batch.metadata):
        assert len(row["turn_spans"]) == 4  # end_at_mistake: false, every step is attempted
        for k, (start, end) in enumerate(row["turn_spans"]):
            # turn_gamma 0: the turn's own reward against the group's at that turn (no std: mean-centred)
            peers = [m["turn_rewards"][k] for j, m in enumerate(batch.metadata) if groups[j] == groups[i]]
            expected = row["turn_rewards"][k] - sum(peers) / len(peers)
            assert batch.advantages[i, start:end].tolist() == pytest.approx([expected] * (end - start), abs=1e-6)
        mixed += len(set(row["turn_rewards"])) > 1
    assert mixed > 0  # some row has right and wrong turns, which sequence-level credit cannot tell apart
    assert torch.isfinite(batch.advantages).all()
